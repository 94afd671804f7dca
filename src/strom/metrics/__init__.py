"""What a node shows about itself: Prometheus metrics, and /health and /ready for load
balancers, over a small HTTP endpoint (docs/metrics.md)."""
