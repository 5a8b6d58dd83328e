"""`invoke`: run one function from `sam build`'s output as `sam local invoke` would, no container.

Exit status: 0 the handler returned (its result on stdout); 1 the function failed (unhandled
error, import error, a result that is not JSON, a crash: Lambda's error document on stdout);
2 it could not be started (usage or configuration: unknown function, a variable without a
local value, no build); 124 it ran past its timeout. The function's logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from webhook_inbox import config
from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.local_invoke import environment, runner, template

DESCRIPTION = (
    "Run FUNCTION once with an event, the way `sam local invoke` does but without Docker: the "
    "template's handler, timeout, memory and environment (parameter defaults, samconfig.toml, "
    "--parameter-overrides, --env-vars), from the built artifacts in --build-dir (default "
    ".aws-sam/build next to the template) in a fresh interpreter with only the function and "
    "its layers on its path. Without a build it runs from the source tree and says so."
)
EPILOG = (
    "exit codes: 0 the handler returned, 1 the function failed, 2 usage/configuration error, "
    "124 timed out. The response goes to stdout, the function's logs to stderr."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("function", metavar="FUNCTION", help="the function's logical id")
    parser.add_argument(
        "-e", "--event", metavar="FILE", help="event JSON ('-' reads stdin; default {})"
    )
    parser.add_argument(
        "-n", "--env-vars", metavar="FILE", help="SAM's env-vars JSON: local values by function"
    )
    parser.add_argument(
        "-t", "--template", default="template.yaml", help="the SAM template (default template.yaml)"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--build-dir", metavar="DIR", help="sam build's output directory")
    where.add_argument(
        "--source", action="store_true", help="run from the source tree even when a build exists"
    )
    parser.add_argument(
        "--parameter-overrides",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="template parameters (Key=Value or ParameterKey=Key,ParameterValue=Value)",
    )
    parser.add_argument(
        "--config-file",
        metavar="FILE",
        help="samconfig.toml (default: next to the template)",
    )
    parser.add_argument(
        "--config-env", default="default", help="samconfig environment (default 'default')"
    )
    parser.add_argument(
        "--region", help="AWS region (default $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1)"
    )
    parser.add_argument(
        "--report-imports",
        metavar="FILE",
        help="write the function's sys.path and every imported module's file to FILE (JSON)",
    )


def _read_event(name: str | None) -> Any:
    if name is None:
        return {}
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text("utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {name}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"event {name} is not JSON: {exc}") from None


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def prepare(args: argparse.Namespace) -> runner.Invocation:
    """Everything about the invocation, checked before a process starts."""
    shell = dict(config.ENVIRONMENT)
    region = (
        args.region or shell.get("AWS_REGION") or shell.get("AWS_DEFAULT_REGION") or "us-east-1"
    )
    template_path = Path(args.template).resolve()
    samconfig = (
        Path(args.config_file) if args.config_file else template_path.parent / "samconfig.toml"
    )
    tpl = template.open_template(
        template_path,
        samconfig=samconfig,
        config_env=args.config_env,
        overrides=args.parameter_overrides,
        region=region,
    )
    spec = template.function_spec(tpl, args.function)
    env_file = environment.read_env_vars_file(Path(args.env_vars) if args.env_vars else None)
    variables, ignored = environment.function_variables(spec, env_file, shell)
    if ignored:
        _say(
            f"note: {', '.join(ignored)} not set: the template does not declare "
            f"{'it' if len(ignored) == 1 else 'them'} for {spec.logical_id} (sam ignores them too)"
        )
    event = _read_event(args.event)

    build_dir = Path(args.build_dir) if args.build_dir else tpl.root / ".aws-sam" / "build"
    if not args.source and (args.build_dir or (build_dir / spec.logical_id).is_dir()):
        paths = runner.build_paths(build_dir, spec.logical_id, spec.layers, spec.runtime)
        task_root = paths[0]
        interpreter: tuple[str, ...] = (runner.runtime_interpreter(spec.runtime), "-I", "-S")
        _say(f"running {spec.logical_id} from the build in {build_dir}")
        if note := runner.architecture_note(spec.architectures):
            _say(note)
    else:
        task_root = (tpl.root / spec.code_uri).resolve()
        layers = [(tpl.root / template.layer_spec(tpl, lid).content_uri) for lid in spec.layers]
        paths = [task_root, *(p / "python" if (p / "python").is_dir() else p for p in layers)]
        interpreter = (sys.executable, "-I")
        _say(
            f"running {spec.logical_id} from the SOURCE TREE ({spec.code_uri}), not a build: "
            "dependencies come from this Python environment; run `sam build` to test what "
            "would be deployed"
        )
    return runner.Invocation(
        interpreter=interpreter,
        path=tuple(paths),
        task_root=task_root,
        environment=environment.process_environment(
            spec, variables, task_root=task_root, region=region, shell=shell
        ),
        spec={
            "handler": spec.handler,
            "event": event,
            "function_name": spec.logical_id,
            "memory_mb": spec.memory_mb,
            "region": region,
            "log_group": spec.log_group,
            "report_imports": str(Path(args.report_imports).resolve())
            if args.report_imports
            else None,
        },
        timeout=float(spec.timeout),
    )


def cmd_invoke(args: argparse.Namespace) -> int:
    invocation = prepare(args)
    with runner.runtime_packages(invocation) as extra:
        if extra:
            _say("note: no layer ships boto3: this environment's stands in for Lambda's runtime")
        outcome = runner.run(replace(invocation, path=(*invocation.path, *extra)))
    print(outcome.answer)
    if outcome.exit_code == runner.EXIT_TIMEOUT:
        _say(f"error: {invocation.spec['function_name']} timed out after {invocation.timeout:g} s")
    return outcome.exit_code
