"""Operations endpoints of the site: liveness, readiness and Prometheus metrics (docs/deploy.md)."""
