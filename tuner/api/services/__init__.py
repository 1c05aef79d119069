"""What the routes do, apart from HTTP, one module per resource.

Kept out of the route modules so the rules (nothing stored half-way, one job per key) read in
one place and the routes stay thin; the report a query names is core (``tuner.report``), as
the CLI prints it too. Each takes the ``Store`` the route was given and raises domain errors
(``tuner.errors``: ``JobNotFound`` from the store is a ``NotFound``, ``Conflict``,
``InvalidInput``), never HTTP ones: the app's one error mapping answers them 404, 409, 422.
"""
