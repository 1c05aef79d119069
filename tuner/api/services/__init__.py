"""What the routes do, apart from HTTP, one module per resource.

Kept out of the route modules so the rules (nothing stored half-way, one job per key, which
slice of the results a query names) read in one place and the routes stay thin. Each takes
the ``Store`` the route was given; a missing job is ``JobNotFound`` from the store, answered
404 by the app's one handler.
"""
