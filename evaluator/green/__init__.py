"""The AgentBeats green agent: an A2A server that assesses one purple agent on one app.

- :mod:`evaluator.green.declarations`: what an app declares (its ``config`` keys, its NetArena
  profile), plain data below :mod:`evaluator.app`;
- :mod:`evaluator.green.request`: the assessment request and its ``config`` keys (each app's
  own, :meth:`evaluator.app.App.green_config_keys`);
- :mod:`evaluator.green.counts`, :mod:`evaluator.green.netarena`: NetArena's query counts and
  result fields, for the apps that declare a NetArena profile
  (:meth:`evaluator.app.App.netarena_profile`);
- :mod:`evaluator.green.assessment`: planning the queries, running them as ``evaluate`` does,
  the per-query and summary records;
- :mod:`evaluator.green.server`: the a2a-sdk executor, agent card and ASGI app;
- :mod:`evaluator.green.cli`: ``python -m evaluator.green`` / ``manage.py serve_green``.

docs/agentbeats.md describes the request, the artifacts and how to run it.
"""
