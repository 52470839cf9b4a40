"""Tests of the embedded Kubernetes cluster (need root and the binaries of scripts/build_k8s.sh)."""
