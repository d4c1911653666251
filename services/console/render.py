"""The console's pages as HTML: its Jinja2 templates, and the values every page is drawn with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from services.console.config import ConsoleConfig
from services.console.identity import CSRF_FIELD, Session, Sessions
from services.console.links import link, session_link
from services.console.messages import CLASS_SOURCES
from services.console.outcomes import recovery
from services.console.request_keys import ACTOR, SESSION
from services.console.rules import rule_of
from shared.platform.text import age

HERE = Path(__file__).parent


def template_environment() -> jinja2.Environment:
    """The pages' templates: every value escaped unless it is markup the console made."""
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    templates.globals.update(
        age=age,
        link=link,
        session_link=session_link,
        rule_of=rule_of,
        class_sources=CLASS_SOURCES,
        recovery=recovery,
    )
    return templates


class Renderer:
    """Draws a page for a request: its template's values, with who is signed in, the session's
    anti-forgery token for its forms, and whether the development login is on."""

    def __init__(self, config: ConsoleConfig, sessions: Sessions) -> None:
        self.config = config
        self.sessions = sessions
        self.templates = template_environment()

    def page(self, request: web.Request, template: str, status: int = 200, **values: Any) -> web.Response:
        session: Session | None = request.get(SESSION)
        html = self.templates.get_template(template).render(
            actor=request.get(ACTOR),
            csrf=self.sessions.csrf_token(session) if session else "",
            csrf_field=CSRF_FIELD,
            dev_login=bool(self.config.dev_token),
            path=request.path,
            **values,
        )
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")

    def error(
        self, request: web.Request, status: int, message: str, next_step: tuple[str, str] | None = None
    ) -> web.Response:
        """The page that says why nothing was done, with a link to what to do instead if there is one."""
        return self.page(request, "error.html", status, message=message, next_step=next_step)
