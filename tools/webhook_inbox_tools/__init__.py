"""The project's tools: the ``webhook-inbox`` CLI, the local dev stack and operator actions.

Installed with the project (``pip install -e .``) and never shipped in the Lambda layer: nothing
in the runtime package (``webhook_inbox``) imports from here.
"""
