"""`strom console`: a web console for any Kafka-compatible cluster.

It talks to the cluster through the Kafka protocol only (confluent-kafka, and strom's own
client for what librdkafka cannot ask), the same way the `strom` client commands do, and
serves plain HTML pages with a little JavaScript: nothing to build on the user's machine.

- html.py, pages.py, group_pages.py: pure rendering of plain values into HTML
- browse.py: the message browser's query, record filter and value formats (pure)
- throughput.py: rates from Prometheus samples and their chart (pure); feed.py samples
- backend.py: what the pages show, asked of the cluster
- search.py: message searches running in the background, with their progress
- server.py: the HTTP server and its routes
"""
