"""``webhook-inbox invoke``: run a function as ``sam local invoke`` does, without a container.

Modules: ``template`` (read template.yaml and samconfig.toml, resolve the function's settings),
``environment`` (the variables the function sees), ``child`` (the code the fresh interpreter
runs; standard library only), ``runner`` (start it, enforce the timeout, collect the result).
"""
