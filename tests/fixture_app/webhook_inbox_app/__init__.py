"""The project's fixture application: the example handlers, tables and migrations as shipped.

The project's tests run against this copy (tests/conftest.py puts its folder first on the path),
never against ``application/webhook_inbox_app``, which is the team's to change: adding, changing
or removing a handler there never turns a project test red. The example handlers' own tests live
beside the team's copy, in ``application/tests``.
"""
