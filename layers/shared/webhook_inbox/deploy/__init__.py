"""Deploy-time custom resources: the CloudFormation response protocol (:mod:`.custom_resource`)
and the resources the stack creates through it (:mod:`.database_protection`,
:mod:`.log_groups`; the migrations custom resource uses :mod:`webhook_inbox.store.migrate`)."""

__all__: list[str] = []
