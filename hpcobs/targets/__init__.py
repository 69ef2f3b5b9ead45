"""One module per output format that is not content: Grafana provisioning, Prometheus rule tests, the
Kubernetes and Mimir rule files."""
