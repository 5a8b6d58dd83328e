"""The console's pages: each one request to the operator backend, rendered with Jinja2.

The backend is the CLI's (:func:`webhook_inbox_tools.cli.operator_backend.backend_for`): the
running ``webhook-inbox dev``'s operator function, a stack's through its IAM Function URLs with
``--stack``, or a database of this machine's — the same commands, the same audit, and the
principal the operator function authenticated as the one who acts. The console keeps nothing:
every page asks again.

URLs are the state a person shares: ``/events?q=…&provider=…&status=…`` is the events list with
that filter, ``/events/<provider>/<event or delivery id>`` one event. Actions are POSTs (the gate
insists on their Origin); a page fetched by htmx (``HX-Request``) gets only its fragment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from webhook_inbox.errors import OperatorNotFound, OperatorRequestRefused, WebhookInboxError
from webhook_inbox.operations.commands import Answer
from webhook_inbox_tools.cli.operator_backend import Backend
from webhook_inbox_tools.console import health, rejections, views

PAGE_SIZE = 50


@dataclass
class Reply:
    status: int
    body: str
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


class Pages:
    def __init__(
        self,
        backend: Backend,
        *,
        live_every_s: float = 3.0,
        refused: rejections.Source = rejections.nowhere,
    ) -> None:
        self.backend = backend
        self.live_every_s = live_every_s
        self.refused = refused
        # The backend holds one connection (a database of this machine's): one call at a time.
        self._lock = threading.Lock()
        self.operator: str | None = backend.operator

    def call(self, body: dict[str, Any]) -> Answer:
        with self._lock:
            answer = self.backend.call(body)
            self.operator = answer.operator or self.backend.operator or self.operator
        return answer

    # --- routing ---------------------------------------------------------------------------

    def dispatch(
        self, method: str, target: str, form: Sequence[tuple[str, str]], *, partial: bool
    ) -> Reply:
        parts = urlsplit(target)
        query = parse_qsl(parts.query, keep_blank_values=True)
        segments = [unquote(s) for s in parts.path.strip("/").split("/") if s]
        route = self._route(method, segments)
        if route is None:
            return self._error(404, "no such page", partial)
        try:
            return route(query if method != "POST" else list(form), partial)
        except OperatorNotFound as exc:
            return self._error(404, str(exc), partial)
        except OperatorRequestRefused as exc:
            return self._error(exc.status, str(exc), partial)
        except WebhookInboxError as exc:  # unreachable backend, database down: say so
            return self._error(502, f"{self.backend.label}: {exc}", partial)

    def _route(self, method: str, s: list[str]) -> Callable[..., Reply] | None:
        """The page for a method and path; None: no such page."""
        if method == "POST":
            return self._action_route(s)
        if method not in {"GET", "HEAD"}:
            return None
        fixed: dict[tuple[str, ...], Callable[..., Reply]] = {
            (): lambda _q, _p: Reply(303, "", headers={"Location": "/events"}),
            ("events",): self.events,
            ("health",): self.health,
            ("health.json",): lambda _q, _p: health.sample(self.call),
        }
        if tuple(s) in fixed:
            return fixed[tuple(s)]
        if len(s) == 3 and s[0] == "events":
            return lambda _q, p: self.event(s[1], s[2], p)
        return None

    def _action_route(self, s: list[str]) -> Callable[..., Reply] | None:
        if s == ["replay"]:
            return self.replay
        if s in (["pause"], ["resume"]):
            return lambda f, p: self.pausing(s[0], f, p)
        if len(s) == 4 and s[0] == "events" and s[3] == "payload":
            return lambda _f, p: self.payload(s[1], s[2], p)
        if len(s) == 3 and s[0] == "outbox" and s[2] == "retry":
            return lambda f, p: self.outbox_retry(s[1], f, p)
        return None

    def _page(self, template: str, partial: bool, http_status: int = 200, **context: Any) -> Reply:
        body = views.render(
            template,
            partial=partial,
            operator=self.operator,
            where=self.backend.label,
            live_every_s=self.live_every_s,
            **context,
        )
        return Reply(http_status, body)

    def _error(self, status: int, message: str, partial: bool) -> Reply:
        return self._page("error.html", partial, status, message=message, code=status)

    # --- events ----------------------------------------------------------------------------

    def events(self, query: list[tuple[str, str]], partial: bool) -> Reply:
        chosen = views.EventQuery.parse(query)
        body: dict[str, Any] = {
            "command": "events list",
            "filter": chosen.filter(),
            "limit": PAGE_SIZE,
        }
        if chosen.cursor:
            body["cursor"] = chosen.cursor
        answer = self.call(body)
        events = answer.result["events"]
        if chosen.q and len(events) == 1 and not chosen.cursor and not partial:
            # A search that names one event goes to it, as a search box should.
            found = events[0]
            return Reply(303, "", headers={"Location": views.event_url(found)})
        return self._page(
            "events_rows.html" if partial else "events.html",
            partial,
            chosen=chosen,
            events=events,
            next_cursor=answer.result["next_cursor"],
            messages=answer.messages,
        )

    def _show(self, provider: str, some_id: str, *, payload: bool = False) -> Answer:
        body = {"command": "events show", "provider": provider, "id": some_id}
        return self.call({**body, "payload": True} if payload else body)

    def event(self, provider: str, some_id: str, partial: bool) -> Reply:
        answer = self._show(provider, some_id)
        event = answer.result
        if event["event_id"] != some_id and not partial:
            # Found by delivery id: the event's own URL is the one to share.
            return Reply(303, "", headers={"Location": views.event_url(event)})
        actions = event.get("operator_actions") or []
        context: dict[str, Any] = {"event": event, "actions": actions}
        if partial:  # the live part: state, runs, audit
            return self._page("event_live.html", partial, **context)
        outbox = self.call(
            {"command": "outbox list", "filter": {"event": event["id"]}, "limit": PAGE_SIZE}
        )
        return self._page(
            "event.html",
            partial,
            **context,
            outbox=outbox.result["messages"],
            more_outbox=outbox.result["next_cursor"] is not None,
        )

    def payload(self, provider: str, some_id: str, partial: bool) -> Reply:
        answer = self._show(provider, some_id, payload=True)
        return self._page("payload.html", partial, event=answer.result)

    # --- actions ---------------------------------------------------------------------------

    def replay(self, form: list[tuple[str, str]], partial: bool) -> Reply:
        values = dict(form)
        reason = values.get("reason", "").strip()
        confirm = values.get("step") == "confirm"
        body: dict[str, Any] = {"command": "replay", "reason": reason, "dry_run": not confirm}
        back = values.get("back") or "/events"
        if values.get("id"):
            body.update(provider=values.get("provider", ""), ids=[values["id"]])
        else:
            chosen = views.EventQuery.parse(form)
            body["filter"] = chosen.filter()
            if confirm:
                rows = [int(r) for r in values.get("only_rows", "").split(",") if r.isdigit()]
                body.update(confirmed=True, only_rows=rows)
            else:
                body["max"] = min(int(values.get("max") or 100), self.backend.max_rows)
        answer = self.call(body)
        return self._page(
            "action_result.html",
            partial,
            what="replay",
            result=answer.result,
            messages=answer.messages,
            form=values,
            confirm=confirm,
            back=back,
            action_path="/replay",
            # A filtered set is confirmed as previewed: rows that arrived since are left alone.
            only_rows=(
                ",".join(str(r["id"]) for r in answer.result.get("before", []))
                if "filter" in body
                else ""
            ),
        )

    def outbox_retry(self, message_id: str, form: list[tuple[str, str]], partial: bool) -> Reply:
        values = dict(form)
        if not message_id.isdigit():
            raise OperatorRequestRefused("outbox retry: a message id is a number")
        confirm = values.get("step") == "confirm"
        answer = self.call(
            {
                "command": "outbox retry",
                "ids": [int(message_id)],
                "reason": values.get("reason", "").strip(),
                "dry_run": not confirm,
            }
        )
        return self._page(
            "action_result.html",
            partial,
            what="outbox retry",
            result=answer.result,
            messages=answer.messages,
            form=values,
            confirm=confirm,
            back=values.get("back") or "/events",
            action_path=f"/outbox/{int(message_id)}/retry",
            only_rows="",
        )

    def pausing(self, command: str, form: list[tuple[str, str]], partial: bool) -> Reply:
        values = dict(form)
        body: dict[str, Any] = {
            "command": command,
            "provider": values.get("provider", "").strip(),
            "type": values.get("type", "").strip() or "*",
        }
        if command == "pause":
            body["reason"] = values.get("reason", "").strip()
        answer = self.call(body)
        return self._page(
            "pause_result.html", partial, what=command, result=answer.result, back="/health"
        )

    # --- health ----------------------------------------------------------------------------

    def health(self, query: list[tuple[str, str]], partial: bool) -> Reply:
        status = self.call({"command": "status"}).result
        context: dict[str, Any] = {"status": status, "backlog": health.backlog(status)}
        if partial:  # the live part: backlog and pauses (the traffic reads a window: on demand)
            return self._page("health_live.html", partial, **context)
        name = dict(query).get("window") or health.DEFAULT_WINDOW
        if name not in health.WINDOWS:
            raise OperatorRequestRefused(f"window: one of {', '.join(health.WINDOWS)}")
        found = health.traffic(self.call, self.refused, health.WINDOWS[name])
        return self._page(
            "health.html", partial, **context, traffic=found, windows=list(health.WINDOWS)
        )


def shareable(path: str, query: Sequence[tuple[str, str]]) -> str:
    """``path`` with ``query`` (empty values left out), as the address bar shows it."""
    kept = [(k, v) for k, v in query if v]
    return quote(path) + (f"?{urlencode(kept)}" if kept else "")
