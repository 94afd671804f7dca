/* strom.protocol._walk: the per-record walks of the produce and Arrow paths, compiled.
 *
 * record_lengths_fill(data, pos, end, count, min_varint) -> bool answers exactly what
 * records.py's pure-Python record_lengths_fill answers: whether `count` records, each a
 * zigzag varint length (at most five bytes, even, at least `min_varint`) followed by that
 * many bytes, fill data[pos:end] exactly. It only reads; it never keeps the buffer.
 *
 * decode_columns(data, pos, end, count, base_offset, first_timestamp, max_timestamp,
 * log_append_time, with_headers, out) -> None does exactly what columns.py's
 * decode_columns_py does: it decodes the `count` records of data[pos:end] and appends
 * them to the 14 Arrow column buffers of `out` (the layout is in columns.py). It walks
 * the records twice: first to check them and count what they add, then, once every
 * bytearray has been resized to its final length, to write them. So bad input raises
 * ValueError before anything in `out` has changed.
 *
 * Built at install time when a C compiler is there; without it the Python loops run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int
fill(const unsigned char *data, Py_ssize_t size, Py_ssize_t pos, Py_ssize_t end,
     Py_ssize_t count, uint64_t min_varint)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t value = 0;
        int shift = 0;
        for (;;) {
            if (shift > 28 || pos < 0 || pos >= size) {
                return 0;
            }
            unsigned char b = data[pos++];
            value |= (uint64_t)(b & 0x7F) << shift;
            if (b < 0x80) {
                break;
            }
            shift += 7;
        }
        if ((value & 1) || value < min_varint) {
            return 0;
        }
        pos += (Py_ssize_t)(value >> 1);
    }
    return pos == end;
}

static PyObject *
record_lengths_fill(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end, count;
    unsigned long long min_varint;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nnnK", &view, &pos, &end, &count, &min_varint)) {
        return NULL;
    }
    int ok = 0;
    if (count >= 0 && pos >= 0 && end >= pos) {
        ok = fill((const unsigned char *)view.buf, view.len, pos, end, count,
                  (uint64_t)min_varint);
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(ok);
}

/* ---- decode_columns ------------------------------------------------------------- */

enum {
    OFFSETS,
    TIMESTAMPS,
    KEY_OFFSETS,
    KEY_DATA,
    KEY_VALIDITY,
    VALUE_OFFSETS,
    VALUE_DATA,
    VALUE_VALIDITY,
    HEADER_LIST_OFFSETS,
    HEADER_KEY_OFFSETS,
    HEADER_KEY_DATA,
    HEADER_VALUE_OFFSETS,
    HEADER_VALUE_DATA,
    HEADER_VALUE_VALIDITY,
    COLUMNS
};

/* What one walk over the records needs and finds. The first walk only checks and counts
 * (write == 0); the second, over records the first has checked, also writes each column
 * at `at`, starting at its entry length, and sets validity bits from row `row` and header
 * row `header_row` on (its counts go unused). */
typedef struct {
    int64_t base_offset;
    int64_t first_timestamp;
    int64_t max_timestamp;
    int log_append_time;
    int with_headers;
    int write;
    Py_ssize_t rows, key_bytes, value_bytes;
    Py_ssize_t headers, header_key_bytes, header_value_bytes;
    unsigned char *buf[COLUMNS];
    Py_ssize_t at[COLUMNS];
    Py_ssize_t row, header_row;
} walk_state;

/* A zigzag varint of at most five bytes that fits an int32, read from [*pp, end). */
static inline const char *
read_varint(const unsigned char **pp, const unsigned char *end, int32_t *out)
{
    const unsigned char *p = *pp;
    uint32_t value = 0;
    for (int i = 0; i < 5; i++) {
        if (p >= end) {
            return "a varint runs past its record";
        }
        unsigned char b = *p++;
        if (i == 4 && b > 0x0F) {
            return "a varint is longer than 5 bytes or overflows an int32";
        }
        value |= (uint32_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            break;
        }
    }
    *pp = p;
    *out = (int32_t)((value >> 1) ^ (0u - (value & 1)));
    return NULL;
}

/* A zigzag varlong of at most ten bytes that fits an int64, read from [*pp, end). */
static inline const char *
read_varlong(const unsigned char **pp, const unsigned char *end, int64_t *out)
{
    const unsigned char *p = *pp;
    uint64_t value = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) {
            return "a varlong runs past its record";
        }
        unsigned char b = *p++;
        if (i == 9 && b > 0x01) {
            return "a varlong is longer than 10 bytes or overflows an int64";
        }
        value |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            break;
        }
    }
    *pp = p;
    *out = (int64_t)((value >> 1) ^ (0u - (value & 1)));
    return NULL;
}

/* A varint length and that many bytes from [*pp, end): *size -1 (and *field NULL) for
 * a null field, which only a nullable field may be. */
static inline const char *
read_field(const unsigned char **pp, const unsigned char *end, int nullable,
           const unsigned char **field, int32_t *size)
{
    const char *err = read_varint(pp, end, size);
    if (err != NULL) {
        return err;
    }
    if (*size == -1 && nullable) {
        *field = NULL;
        return NULL;
    }
    if (*size < 0) {
        return "a field has a negative length";
    }
    if (*size > end - *pp) {
        return "a field runs past its record";
    }
    *field = *pp;
    *pp += *size;
    return NULL;
}

static inline void
put_le64(unsigned char *dst, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        dst[i] = (unsigned char)(v >> (8 * i));
    }
}

static inline void
put_le32(unsigned char *dst, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        dst[i] = (unsigned char)(v >> (8 * i));
    }
}

static inline void
put_bit(unsigned char *bitmap, Py_ssize_t index, int set)
{
    unsigned char mask = (unsigned char)(1u << (index & 7));
    if (set) {
        bitmap[index >> 3] |= mask;
    }
    else {
        bitmap[index >> 3] &= (unsigned char)~mask;
    }
}

/* Append a field's bytes to column `data`, its end offset to `offsets` and its bit at
 * `index` to `validity` (-1: no bitmap). */
static inline void
put_field(walk_state *w, int offsets, int data, int validity, Py_ssize_t index,
          const unsigned char *field, int32_t size)
{
    if (field != NULL && size > 0) {
        memcpy(w->buf[data] + w->at[data], field, (size_t)size);
        w->at[data] += size;
    }
    put_le32(w->buf[offsets] + w->at[offsets], (uint32_t)w->at[data]);
    w->at[offsets] += 4;
    if (validity >= 0) {
        put_bit(w->buf[validity], index, field != NULL);
    }
}

static inline int
add_overflows(int64_t a, int64_t b)
{
    return (b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b);
}

/* Walk `count` records over [p, end): NULL when they fill it exactly, else why not. */
static const char *
walk(const unsigned char *p, const unsigned char *end, Py_ssize_t count, walk_state *w)
{
    const char *err;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t length, offset_delta, key_size, value_size, header_count;
        int64_t timestamp_delta;
        const unsigned char *key, *value;
        if ((err = read_varint(&p, end, &length)) != NULL) {
            return err;
        }
        if (length < 0) {
            return "a record has a negative length";
        }
        if (length > end - p) {
            return "a record runs past the end of its records";
        }
        const unsigned char *record_end = p + length;
        if (p == record_end) {
            return "a record ends before its attributes";
        }
        p++; /* attributes: unused in v2 */
        if ((err = read_varlong(&p, record_end, &timestamp_delta)) != NULL
            || (err = read_varint(&p, record_end, &offset_delta)) != NULL
            || (err = read_field(&p, record_end, 1, &key, &key_size)) != NULL
            || (err = read_field(&p, record_end, 1, &value, &value_size)) != NULL
            || (err = read_varint(&p, record_end, &header_count)) != NULL) {
            return err;
        }
        if (header_count < 0) {
            return "a record has a negative header count";
        }
        for (int32_t h = 0; h < header_count; h++) {
            const unsigned char *header_key, *header_value;
            int32_t header_key_size, header_value_size;
            if ((err = read_field(&p, record_end, 0, &header_key, &header_key_size)) != NULL
                || (err = read_field(&p, record_end, 1, &header_value, &header_value_size))
                       != NULL) {
                return err;
            }
            w->header_key_bytes += header_key_size;
            w->header_value_bytes += header_value_size > 0 ? header_value_size : 0;
            if (w->write && w->with_headers) {
                put_field(w, HEADER_KEY_OFFSETS, HEADER_KEY_DATA, -1, 0, header_key,
                          header_key_size);
                put_field(w, HEADER_VALUE_OFFSETS, HEADER_VALUE_DATA, HEADER_VALUE_VALIDITY,
                          w->header_row++, header_value, header_value_size);
            }
        }
        if (p != record_end) {
            return "a record's fields do not fill its length";
        }
        w->headers += header_count;
        w->key_bytes += key_size > 0 ? key_size : 0;
        w->value_bytes += value_size > 0 ? value_size : 0;
        w->rows++;
        if (add_overflows(w->base_offset, offset_delta)) {
            return "a record's offset overflows an int64";
        }
        if (!w->log_append_time && add_overflows(w->first_timestamp, timestamp_delta)) {
            return "a record's timestamp overflows an int64";
        }
        if (w->write) {
            int64_t timestamp = w->log_append_time ? w->max_timestamp
                                                   : w->first_timestamp + timestamp_delta;
            int64_t offset = w->base_offset + offset_delta;
            put_le64(w->buf[OFFSETS] + w->at[OFFSETS], (uint64_t)offset);
            w->at[OFFSETS] += 8;
            put_le64(w->buf[TIMESTAMPS] + w->at[TIMESTAMPS], (uint64_t)timestamp);
            w->at[TIMESTAMPS] += 8;
            put_field(w, KEY_OFFSETS, KEY_DATA, KEY_VALIDITY, w->row, key, key_size);
            put_field(w, VALUE_OFFSETS, VALUE_DATA, VALUE_VALIDITY, w->row, value, value_size);
            w->row++;
            if (w->with_headers) {
                put_le32(w->buf[HEADER_LIST_OFFSETS] + w->at[HEADER_LIST_OFFSETS],
                         (uint32_t)w->header_row);
                w->at[HEADER_LIST_OFFSETS] += 4;
            }
        }
    }
    return p == end ? NULL : "the records do not fill their section exactly";
}

/* Truncate the first `n` columns back to their entry lengths, keeping the exception. */
static void
truncate_back(PyObject **cols, const Py_ssize_t *entry, int n)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
#endif
    for (int k = 0; k < n; k++) {
        if (PyByteArray_GET_SIZE(cols[k]) != entry[k]
            && PyByteArray_Resize(cols[k], entry[k]) < 0) {
            PyErr_Clear(); /* shrinking what was just grown: cannot happen */
        }
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(type, value, traceback);
#endif
}

static Py_ssize_t
bitmap_size(Py_ssize_t entry, Py_ssize_t first, Py_ssize_t added)
{
    Py_ssize_t needed = (first + added + 7) / 8;
    return added > 0 && needed > entry ? needed : entry;
}

/* Check, size and fill: the body of decode_columns once its arguments are parsed. */
static PyObject *
decode_into(const Py_buffer *view, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count,
            walk_state *w, PyObject *out)
{
    if (!PyTuple_Check(out) || PyTuple_GET_SIZE(out) != COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "out must be a tuple of 14 bytearrays");
        return NULL;
    }
    PyObject *cols[COLUMNS]; /* borrowed from the tuple, which the call's args hold */
    Py_ssize_t entry[COLUMNS], target[COLUMNS];
    for (int k = 0; k < COLUMNS; k++) {
        cols[k] = PyTuple_GET_ITEM(out, k);
        if (!PyByteArray_Check(cols[k])) {
            PyErr_SetString(PyExc_ValueError, "out must be a tuple of 14 bytearrays");
            return NULL;
        }
        for (int j = 0; j < k; j++) {
            if (cols[j] == cols[k]) {
                PyErr_SetString(PyExc_ValueError, "out holds the same bytearray twice");
                return NULL;
            }
        }
        entry[k] = target[k] = PyByteArray_GET_SIZE(cols[k]);
    }
    if (entry[KEY_OFFSETS] < 4 || entry[VALUE_OFFSETS] < 4
        || (w->with_headers && (entry[HEADER_LIST_OFFSETS] < 4 || entry[HEADER_KEY_OFFSETS] < 4
                                || entry[HEADER_VALUE_OFFSETS] < 4))) {
        PyErr_SetString(PyExc_ValueError, "an offsets column must start with an int32 0");
        return NULL;
    }
    if (count < 0 || pos < 0 || end < pos || end > view->len) {
        PyErr_SetString(PyExc_ValueError, "count, pos or end is out of range");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)view->buf;
    const char *err = walk(data + pos, data + end, count, w);
    if (err != NULL) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_ssize_t row = entry[OFFSETS] / 8, header_row = entry[HEADER_VALUE_OFFSETS] / 4 - 1;
    if (w->rows > 0
        && (entry[KEY_DATA] + w->key_bytes > INT32_MAX
            || entry[VALUE_DATA] + w->value_bytes > INT32_MAX
            || (w->with_headers && header_row + w->headers > INT32_MAX))) {
        PyErr_SetString(PyExc_ValueError, "an int32 offset would overflow");
        return NULL;
    }
    if (w->with_headers && w->headers > 0
        && (entry[HEADER_KEY_DATA] + w->header_key_bytes > INT32_MAX
            || entry[HEADER_VALUE_DATA] + w->header_value_bytes > INT32_MAX)) {
        PyErr_SetString(PyExc_ValueError, "an int32 header offset would overflow");
        return NULL;
    }
    target[OFFSETS] += 8 * w->rows;
    target[TIMESTAMPS] += 8 * w->rows;
    target[KEY_OFFSETS] += 4 * w->rows;
    target[KEY_DATA] += w->key_bytes;
    target[KEY_VALIDITY] = bitmap_size(entry[KEY_VALIDITY], row, w->rows);
    target[VALUE_OFFSETS] += 4 * w->rows;
    target[VALUE_DATA] += w->value_bytes;
    target[VALUE_VALIDITY] = bitmap_size(entry[VALUE_VALIDITY], row, w->rows);
    if (w->with_headers) {
        target[HEADER_LIST_OFFSETS] += 4 * w->rows;
        target[HEADER_KEY_OFFSETS] += 4 * w->headers;
        target[HEADER_KEY_DATA] += w->header_key_bytes;
        target[HEADER_VALUE_OFFSETS] += 4 * w->headers;
        target[HEADER_VALUE_DATA] += w->header_value_bytes;
        target[HEADER_VALUE_VALIDITY] =
            bitmap_size(entry[HEADER_VALUE_VALIDITY], header_row, w->headers);
    }
    for (int k = 0; k < COLUMNS; k++) {
        if (target[k] != entry[k] && PyByteArray_Resize(cols[k], target[k]) < 0) {
            truncate_back(cols, entry, k);
            return NULL;
        }
    }
    for (int k = 0; k < COLUMNS; k++) {
        w->buf[k] = (unsigned char *)PyByteArray_AS_STRING(cols[k]);
        w->at[k] = entry[k];
    }
    static const int bitmaps[] = {KEY_VALIDITY, VALUE_VALIDITY, HEADER_VALUE_VALIDITY};
    for (size_t b = 0; b < sizeof bitmaps / sizeof bitmaps[0]; b++) {
        int k = bitmaps[b];
        if (target[k] > entry[k]) { /* bitmaps grow by zero bytes */
            memset(w->buf[k] + entry[k], 0, (size_t)(target[k] - entry[k]));
        }
    }
    w->write = 1;
    w->row = row;
    w->header_row = header_row;
    if (walk(data + pos, data + end, count, w) != NULL) { /* the first walk passed */
        truncate_back(cols, entry, COLUMNS);
        PyErr_SetString(PyExc_SystemError, "decode_columns: the second walk failed");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
decode_columns(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end, count;
    long long base_offset, first_timestamp, max_timestamp;
    int log_append_time, with_headers;
    PyObject *out;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nnnLLLppO:decode_columns", &view, &pos, &end, &count,
                          &base_offset, &first_timestamp, &max_timestamp, &log_append_time,
                          &with_headers, &out)) {
        return NULL;
    }
    walk_state w;
    memset(&w, 0, sizeof w);
    w.base_offset = base_offset;
    w.first_timestamp = first_timestamp;
    w.max_timestamp = max_timestamp;
    w.log_append_time = log_append_time;
    w.with_headers = with_headers;
    PyObject *result = decode_into(&view, pos, end, count, &w, out);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"record_lengths_fill", record_lengths_fill, METH_VARARGS,
     "Whether count length-prefixed records fill data[pos:end] exactly."},
    {"decode_columns", decode_columns, METH_VARARGS,
     "Append the count records of data[pos:end] to the 14 column buffers of out."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_walk",
    "The per-record walks of the produce and Arrow paths, compiled.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__walk(void)
{
    return PyModule_Create(&module);
}
