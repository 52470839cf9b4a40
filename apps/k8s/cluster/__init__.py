"""An embedded, real Kubernetes cluster without Docker (docs/k8s-cluster.md).

No Django imports here. Entry points: :class:`apps.k8s.cluster.control_plane.Cluster`
(up/down/status, namespaces, namespace-scoped kubeconfigs, dataplane barrier),
:mod:`apps.k8s.cluster.prober` (pod-to-pod reachability), ``python -m apps.k8s.cluster``.
"""
