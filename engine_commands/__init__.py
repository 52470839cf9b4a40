"""Django app holding the management commands that drive the evaluation engine.

``evaluate`` (evaluate an agent endpoint from the command line), ``serve_agent`` (serve a
reference agent), ``k8s_cluster`` and ``k8s_connectivity`` (the Kubernetes emulator),
``check_pack`` (check a variant pack before trusting it, :mod:`evaluator.pack_check`). They wrap
``evaluator`` and ``apps`` entry points and touch no site model; the site's own command
(``demo_round``) stays with ``submissions``. The app has no models.
"""
