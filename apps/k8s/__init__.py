"""The Kubernetes (NetworkPolicy) benchmark application and its embedded cluster."""
