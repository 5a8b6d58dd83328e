"""``webhook-inbox dev``: the whole pipeline on one machine, with the real Lambda handlers.

``apigw`` turns HTTP requests into API Gateway events, ``lambda_runtime`` loads handlers and
plays the SQS event source mapping, ``workers`` runs each function in its own process (as Lambda
isolates them), ``stack`` starts and stops everything.
"""
