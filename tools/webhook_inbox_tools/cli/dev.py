"""`webhook-inbox dev`: run the whole pipeline locally until Ctrl-C (or SIGTERM / SIGHUP)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import tomllib
from pathlib import Path
from types import FrameType

from webhook_inbox import config
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import providers
from webhook_inbox.settings import DatabaseSettings, ProvidersSettings
from webhook_inbox_tools.cli.operator_remote import DEV_ACT_URL, DEV_READ_URL
from webhook_inbox_tools.cli.params import port_number, positive_int
from webhook_inbox_tools.cli.signing import load_registry, providers_in_environment
from webhook_inbox_tools.dev import sam_env
from webhook_inbox_tools.dev.env_file import (
    DEFAULT_ENV_FILE,
    URL_VARIABLE,
    cli_name,
    running_owner,
    write_env_file,
)
from webhook_inbox_tools.dev.lambda_runtime import default_functions_dir, sample_providers_file
from webhook_inbox_tools.dev.reload import SourceWatcher, application_folder
from webhook_inbox_tools.dev.samples import application_handlers, sample_deliveries
from webhook_inbox_tools.dev.stack import REGION, DevOptions, DevStack
from webhook_inbox_tools.dev.workers import say
from webhook_inbox_tools.handler_lab.keys import check_keys

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (loopback)")
    parser.add_argument(
        "--port", type=port_number, default=3000,
        help="HTTP port for POST (and GET) /webhooks/{provider} (0: any)",
    )  # fmt: skip
    parser.add_argument(
        "--providers",
        metavar="FILE",
        help="provider configuration (unset: $PROVIDERS_CONFIG or $PROVIDERS_CONFIG_FILE, else the "
        "sample events/providers.local.json)",
    )
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="use this PostgreSQL (unset: $DATABASE_URL, else a throwaway embedded one)",
    )
    parser.add_argument(
        "--sweep-every", type=float, default=10.0, metavar="SECONDS", help="sweeper period"
    )
    parser.add_argument(
        "--visibility-timeout", type=positive_int, default=30, metavar="SECONDS",
        help="processing queue visibility timeout (a failed batch item comes back after it)",
    )  # fmt: skip
    parser.add_argument(
        "--max-receive-count", type=positive_int, default=5,
        help="receives before SQS moves a message to the DLQ",
    )  # fmt: skip
    parser.add_argument(
        "--ingest-concurrency", type=positive_int, default=4, metavar="N",
        help="ingest execution environments (each its own process and database connection), "
        "as Lambda runs one request per environment at a time",
    )  # fmt: skip
    parser.add_argument(
        "--env-file", type=Path, default=Path(DEFAULT_ENV_FILE), metavar="FILE",
        help="where to write the environment for operator commands from another shell "
        "(removed on exit)",
    )  # fmt: skip
    parser.add_argument("--functions-dir", type=Path, help="where functions/<name>/app.py live")
    sam = parser.add_argument_group(
        "the built functions against this stack (sam local invoke / start-api, webhook-inbox "
        "invoke): see docs/local.md"
    )
    sam.add_argument(
        "--sam-env-vars", type=Path, metavar="FILE",
        help="write a SAM --env-vars file giving each function every variable template.yaml "
        "sets for it, pointed at this stack, and print the commands that use it (removed on "
        "exit); implies --postgres-port 0",
    )  # fmt: skip
    sam.add_argument(
        "--container-host", default="127.0.0.1", metavar="HOST",
        help="how the functions reach this machine, in the file's addresses: 127.0.0.1 for "
        "webhook-inbox invoke; host.docker.internal (Docker Desktop) or the bridge address "
        "(Docker Engine on Linux) for sam local's containers",
    )  # fmt: skip
    sam.add_argument(
        "--bind-host", default="127.0.0.1", metavar="ADDRESS",
        help="address moto and PostgreSQL's TCP listener bind to (Docker Engine on Linux: the "
        "docker0 bridge address, e.g. 172.17.0.1)",
    )  # fmt: skip
    sam.add_argument(
        "--postgres-port", type=port_number, metavar="PORT",
        help="also serve the embedded PostgreSQL on TCP at --bind-host:PORT, password "
        "required (0: any free port)",
    )  # fmt: skip
    sam.add_argument(
        "--template", type=Path, metavar="FILE",
        help="the SAM template the env-vars file follows (unset: template.yaml beside functions/)",
    )  # fmt: skip
    parser.add_argument(
        "--reload",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="restart the functions when a file of your application (application/) or the "
        "providers file changes; the database and the queues stay",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print the functions' own JSON log lines and metrics (without it: one "
        "console line per request, batch, sweep and state change)",
    )


def _providers_file(args: argparse.Namespace) -> Path | None:
    if args.providers:
        return Path(args.providers).resolve()
    if providers_in_environment():
        return None  # the functions read the environment themselves
    return sample_providers_file()


def _validity(provider: providers.Provider) -> str:
    """How long a sample signed now is accepted: the provider's tolerance (Linear's is 60 s)."""
    if not provider.scheme.uses_timestamp:
        return "no timestamp: valid until the secret changes"
    seconds = provider.tolerance_seconds
    if seconds % 60 == 0 and seconds > 60:
        return f"valid for {seconds // 60} minutes"
    return f"valid for {seconds} seconds"


def operator_environment(
    stack: DevStack, base_url: str, providers_file: Path | None
) -> dict[str, str]:
    """What `status`, `events`, `replay` and `outbox` need to act on this stack (its
    operator function's URLs, which they use from this folder by themselves; loaded into a
    shell, the database and queue, which they then use directly), what `trigger`, `sign` and
    `send` need to sign for the providers it serves and reach it, and the providers registry
    (in the stack's moto, AWS_ENDPOINT_URL) the `providers` commands change."""
    env = {
        "DATABASE_URL": stack.database_url,
        "PROCESSING_QUEUE_URL": stack.queue_url,
        "PROVIDERS_REGISTRY_ARN": stack.providers_registry_arn,
        **stack.aws_env(),
        URL_VARIABLE: base_url,
        DEV_READ_URL: f"{base_url}/operator/read",
        DEV_ACT_URL: f"{base_url}/operator/act",
    }
    configured = config.current(ProvidersSettings)
    if providers_file is not None:
        env["PROVIDERS_CONFIG_FILE"] = str(providers_file)
    elif configured.providers_config:
        env["PROVIDERS_CONFIG"] = configured.providers_config
    else:
        env["PROVIDERS_CONFIG_FILE"] = str(Path(configured.providers_config_file).resolve())
    return env


def check_output_files(args: argparse.Namespace) -> None:
    """Refuse, before anything starts, output files this run could not write or must not take
    over: another running dev's env file is that dev's, and removing it on exit would strand
    the shells using it."""
    owner = running_owner(args.env_file)
    if owner is not None:
        raise ConfigurationError(
            f"{args.env_file} belongs to the webhook-inbox dev running as pid {owner}: "
            "stop that one, or give this one another --env-file"
        )
    for flag, path in (("--env-file", args.env_file), ("--sam-env-vars", args.sam_env_vars)):
        if path is None:
            continue
        folder = path.resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise ConfigurationError(f"{flag} {path}: cannot write in {folder}")


def remove_if_unchanged(path: Path, written: bytes) -> None:
    """Remove a file this run wrote, unless something else has replaced it since."""
    try:
        if path.read_bytes() == written:
            path.unlink()
    except OSError:
        pass  # already gone, or not ours to remove


def providers_document(providers_file: Path | None) -> str:
    """The provider configuration as the PROVIDERS_CONFIG JSON the ingest function reads."""
    configured = config.current(ProvidersSettings)
    if providers_file is None and configured.providers_config:
        return configured.providers_config
    path = providers_file or Path(configured.providers_config_file)
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from None
    return json.dumps(tomllib.loads(text)) if path.suffix == ".toml" else text


def postgres_port(args: argparse.Namespace) -> int | None:
    """The embedded PostgreSQL's TCP port (None: Unix socket only), after checking the
    options that only shape the --sam-env-vars file."""
    defaults = {"container_host": "127.0.0.1", "template": None}
    given = [name for name, default in defaults.items() if getattr(args, name) != default]
    if given and args.sam_env_vars is None:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ConfigurationError(f"{flags} only shape the --sam-env-vars file: give it too")
    if args.postgres_port is None and args.sam_env_vars is not None:
        return 0  # a Lambda container cannot reach the Unix socket
    port: int | None = args.postgres_port
    return port


def write_sam_env_vars(
    stack: DevStack, args: argparse.Namespace, providers_file: Path | None
) -> Path:
    """Write the --sam-env-vars file for the running stack and print the commands using it."""
    path: Path = args.sam_env_vars.resolve()
    functions_dir = stack.options.functions_dir
    sam_env.write_for_stack(
        stack,
        path,
        container_host=args.container_host,
        template_path=(args.template or functions_dir.parent / "template.yaml").resolve(),
        providers_config=providers_document(providers_file),
    )
    say("dev", f"SAM env-vars for the built functions written to {path}; after `sam build`, "
        "from the checkout:")  # fmt: skip
    for line in sam_env.commands(
        path, container_host=args.container_host, bind_host=args.bind_host, region=REGION
    ):
        say("dev", f"  {line}")
    return path


def print_banner(registry: providers.Registry, base: str) -> None:
    """The providers served, each with its scheme and the handlers registered for it."""
    handlers = application_handlers()
    names = ", ".join(sorted(registry.providers))
    say("dev", f"POST {base}/webhooks/{{provider}}  providers: {names}")
    for name in sorted(registry.providers):
        provider = registry.providers[name]
        registered = sorted(
            f"{event_type} -> {handler.__name__}"
            for (owner, event_type), handler in handlers.items()
            if owner == name
        )
        what = ", ".join(registered) if registered else "no handlers (its events are ignored)"
        say("dev", f"  {name} ({provider.scheme.name}): {what}")


def print_samples(registry: providers.Registry, base: str, providers_file: Path | None) -> None:
    for sample in sample_deliveries(registry, base, providers_file):
        if sample.curl is None:
            say("dev", f"no sample for {sample.provider!r} ({sample.scheme}): {sample.outcome}")
            continue
        validity = _validity(registry.providers[sample.provider])
        what = f"{sample.event_type}; {sample.outcome}; {validity}"
        say("dev", f"sample {sample.scheme} delivery to {sample.provider!r} ({what}):")
        print(sample.curl, flush=True)


def warn_unserved_handlers(registry: providers.Registry) -> None:
    """Your application, imported here so that an error in it is one line before anything
    starts; and a handler keyed by a provider name that is not configured can never run (a typo
    in either place), which would otherwise only show as events marked ignored."""
    keyed = application_handlers()
    unserved = sorted({name for name, _ in keyed} - set(registry.providers))
    if unserved:
        say("dev", f"warning: handlers registered for providers not configured here: "
            f"{', '.join(unserved)} (their events can never arrive)")  # fmt: skip
    # A type its provider never sends (or a typo): the events would end ignored, silently.
    for problem in check_keys(keyed, registry):
        if problem.warning and problem.provider in registry.providers:
            say("dev", f"warning: {problem}")


def check_env_secrets(registry: providers.Registry) -> None:
    """An ``{"env": NAME}`` secret must be set before the stack starts: the functions would
    otherwise answer every delivery for that provider 503."""
    for provider in registry.providers.values():
        for ref in provider.secret_refs:
            if ref.kind == "env" and not config.env(ref.ref):
                raise ConfigurationError(f"provider {provider.name}: ${ref.ref} is not set")


def reload_functions(stack: DevStack, changed: list[Path], providers_file: Path | None) -> None:
    """--reload: a providers file that no longer validates keeps the running configuration; any
    other change restarts the function processes (which import everything afresh)."""
    names = ", ".join(str(p) for p in changed[:3]) + (" ..." if len(changed) > 3 else "")
    if providers_file is not None and providers_file.resolve() in changed:
        try:
            load_registry(str(providers_file))
        except ConfigurationError as exc:
            say("dev", f"{providers_file} changed but does not validate ({exc}): the functions "
                "keep the configuration they started with")  # fmt: skip
            return
    say("dev", f"{names} changed: restarting the functions")
    problem = stack.restart_functions()
    if problem is None:
        say("dev", "functions restarted with the new code")
    else:
        say("dev", f"the functions did not start again: {problem}; deliveries are answered 503 "
            "with this reason until the next change restarts them")  # fmt: skip


def serve_until_stopped(
    stack: DevStack, args: argparse.Namespace, providers_file: Path | None
) -> int:
    """Watch for a stop request, for edits (--reload) and for function processes dying."""
    folder = application_folder()
    watcher = SourceWatcher([folder] if folder else [], [providers_file] if providers_file else [])
    mode = "restarts the functions on a change" if args.reload else "--no-reload"
    say("dev", f"watching {', '.join(map(str, watcher.watched))} ({mode})")
    say("dev", "ready; Ctrl-C stops everything")
    told_to_restart = False
    while not stack.interrupted.wait(0.5):
        changed = watcher.changed()
        if changed and args.reload:
            reload_functions(stack, changed, providers_file)
        elif changed and not told_to_restart:
            say("dev", f"{changed[0]} changed: the functions still run the code they started "
                "with; restart dev (or leave out --no-reload) to use it")  # fmt: skip
            told_to_restart = True
        # A signal to the whole group reaches the workers too: one may exit a moment before
        # this process's own handler has run. Only a death with no stop request in sight is
        # unexpected.
        if not stack.children_alive() and not stack.interrupted.wait(2.0):
            say("dev", "a function process exited unexpectedly; stopping")
            return 1
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    providers_file = _providers_file(args)
    if providers_file is None and not providers_in_environment():
        raise ConfigurationError("no provider configuration: pass --providers FILE")
    registry = load_registry(str(providers_file) if providers_file else None)
    check_env_secrets(registry)
    check_output_files(args)
    options = DevOptions(
        functions_dir=(args.functions_dir or default_functions_dir()).resolve(),
        providers_file=providers_file,
        database_url=args.database_url or config.current(DatabaseSettings).url or None,
        host=args.host,
        port=args.port,
        sweep_every_s=args.sweep_every,
        visibility_timeout_s=args.visibility_timeout,
        max_receive_count=args.max_receive_count,
        ingest_concurrency=args.ingest_concurrency,
        verbose=args.verbose,
        postgres_port=postgres_port(args),
        bind_host=args.bind_host,
    )
    stack = DevStack(options)
    stack.listen()  # a taken port is one error line, before anything starts or stops
    warn_unserved_handlers(registry)
    stop = stack.interrupted

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in STOP_SIGNALS}
    written: dict[Path, bytes] = {}  # the files this run wrote, removed on exit
    try:
        stack.start()
        if stop.is_set():
            return 0
        base = f"http://{options.host}:{stack.port}"
        print_banner(registry, base)
        say("dev", f"ingest: {options.ingest_concurrency} execution environments")
        say("dev", f"operator function: {base}/operator/read and /operator/act (status, "
            "events, replay and outbox from this folder go through it)")  # fmt: skip
        say("dev", f"processing queue {stack.queue_url} (moto at {stack.endpoint})")
        say("dev", f"DATABASE_URL={stack.database_url}")
        if stack.postgres_tcp is not None:
            tcp = stack.postgres_tcp
            say("dev", f"PostgreSQL also on TCP at {tcp.host}:{tcp.port} (password required)")
        env_file = args.env_file.resolve()
        write_env_file(env_file, operator_environment(stack, base, providers_file))
        written[env_file] = env_file.read_bytes()
        say("dev", f"operator environment written to {env_file}; in another shell:")
        say("dev", f"  set -a; . {shlex.quote(str(env_file))}; set +a")
        say("dev", f"  {cli_name()} trigger --list   # then: trigger PROVIDER EVENT_TYPE")
        if args.sam_env_vars is not None:
            sam_file = write_sam_env_vars(stack, args, providers_file)
            written[sam_file] = sam_file.read_bytes()
        print_samples(registry, base, providers_file)
        return serve_until_stopped(stack, args, providers_file)
    finally:
        say("dev", "stopping")
        stack.stop()
        for path, content in written.items():
            remove_if_unchanged(path, content)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        say("dev", "stopped")
