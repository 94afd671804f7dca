/* strom.protocol._walk: the produce path's per-record walk, compiled.
 *
 * record_lengths_fill(data, pos, end, count, min_varint) -> bool answers exactly what
 * records.py's pure-Python record_lengths_fill answers: whether `count` records, each a
 * zigzag varint length (at most five bytes, even, at least `min_varint`) followed by that
 * many bytes, fill data[pos:end] exactly. It only reads; it never keeps the buffer.
 * Built at install time when a C compiler is there; without it the Python loop runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

static PyMethodDef methods[] = {
    {"record_lengths_fill", record_lengths_fill, METH_VARARGS,
     "Whether count length-prefixed records fill data[pos:end] exactly."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk", "The produce path's per-record walk, compiled.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__walk(void)
{
    return PyModule_Create(&module);
}
