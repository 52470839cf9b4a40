"""Business logic of the site, one module per topic (APIs, pages, admin and tasks stay thin).

Every rule of the site lives in these modules and raises a typed error from
``submissions.errors`` (one root, ``ServiceError``), so that the REST API, the pages, the
admin, rounds and management commands all obey the same rules. Reads live in the selectors
(``submissions.selectors`` and its siblings). Import from the topic module:

- ``teams``: team membership (a team's life is ``accounts.services``);
- ``endpoints``: the rules an agent's endpoint obeys and the clients that call it;
- ``agents``: register, create, update an agent, the header that carries its key;
- ``preflight``: the agent pre-flight: start, gate, run and time-out bookkeeping (its HTTP
  probes are ``evaluator.agents.preflight_checks``);
- ``submissions``: create, prepare, cancel, close and expire submissions;
- ``rounds``: create and close rounds;
- ``packs``: the held-out variant packs a submission or round records;
- ``episodes``: the workers' episode runtime: claim, heartbeat, execute, retry, store, requeue;
- ``dispatch``: Celery tasks sent by name, revoked, and the ``submission_closed`` signal;
- ``storage``: values made storable in every supported database.

Imports run one way, top to bottom: rounds -> submissions -> preflight; agents -> preflight;
episodes -> submissions; every module may use teams, endpoints, packs, dispatch and storage,
which import no other service module.
"""
