"""`mlyard login`, `logout`, `whoami`, `mlyard users …` and `mlyard tokens …`."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table

from mlyard.api.accounts import MAX_PASSWORD, MIN_PASSWORD, TokenInfo
from mlyard.cli.console import console
from mlyard.cli.options import OutputFormat, OutputOption, UsageError
from mlyard.cli.output import print_json
from mlyard.client import Client, ClientError
from mlyard.client import settings as client_settings
from mlyard.spec import parse_duration

users_app = typer.Typer(help="Users (administrators add them and may set their passwords).")
tokens_app = typer.Typer(help="Your API tokens: create one for a script or CI, list them, revoke one.")

PasswordStdin = Annotated[bool, typer.Option("--password-stdin", help="read the password from standard input")]
Expires = Annotated[str | None, typer.Option("--expires", help="lifetime, e.g. 12h, 30d (at most 366d)")]


def _when(at: float | None) -> str:
    return "never" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _lifetime(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as error:
        raise UsageError(f"--expires: {error}") from None


def _password(from_stdin: bool, prompt: str, *, confirm: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm)
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise UsageError(f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    return password


def login(
    user: Annotated[str | None, typer.Option("--user", "-u", help="your user name (asked when left out)")] = None,
    password_stdin: PasswordStdin = False,
    expires: Expires = None,
) -> None:
    """Log in to the server with your password; the CLI then uses the token it gets (stored
    readable by you only, one per server)."""
    url = client_settings.server_url()
    user = user or typer.prompt("User")
    password = _password(password_stdin, "Password", confirm=False)
    with Client(url, token="") as client:
        issued = client.login(user, password, expires_in=_lifetime(expires))
    path = client_settings.store_credentials(url, {"token": issued.token, "user": user, "token_id": issued.info.id})
    console.print(f"Logged in to {url} as [bold]{user}[/]; the token expires {_when(issued.info.expires_at)} "
                  f"and is kept in {path}")


def logout() -> None:
    """Revoke the token `mlyard login` stored for this server and forget it."""
    url = client_settings.server_url()
    entry = client_settings.stored_credentials().get(url)
    if not isinstance(entry, dict):
        raise UsageError(f"not logged in to {url}")
    with Client(url, token=entry.get("token")) as client:
        try:
            client.revoke_token(int(entry.get("token_id", 0)))
            note = ""
        except ClientError as error:  # an expired or already revoked token is forgotten all the same
            note = f" (the server said: {error.message})"
    client_settings.store_credentials(url, None)
    console.print(f"Logged out of {url}{note}")


def whoami(output: OutputOption = OutputFormat.table) -> None:
    """Show who the CLI acts as."""
    with Client() as client:
        me = client.whoami()
    if output is OutputFormat.json:
        print_json(me)
    else:
        console.print(f"{me.name}{' (administrator)' if me.is_admin else ''} on {client.url}")


@users_app.callback(invoke_without_command=True)
def users(context: typer.Context, output: OutputOption = OutputFormat.table) -> None:
    """List users (administrators)."""
    if context.invoked_subcommand is not None:
        return
    with Client() as client:
        found = client.users()
    if output is OutputFormat.json:
        print_json(found)
        return
    table = Table("User", "Administrator", "Password", "Created")
    for user in found:
        table.add_row(user.name, "yes" if user.is_admin else "", "set" if user.has_password else "tokens only",
                      _when(user.created_at))
    console.print(table)


@users_app.command("add")
def add_user(
    name: Annotated[str, typer.Argument(help="lowercase letters, digits, '.', '_' and '-'")],
    admin: Annotated[bool, typer.Option("--admin", help="may administer the platform")] = False,
    password_stdin: PasswordStdin = False,
    no_password: Annotated[bool, typer.Option("--no-password", help="tokens only (a service account)")] = False,
    project: Annotated[list[str] | None, typer.Option(
        "--project", "-p", help="PROJECT or PROJECT:ROLE (viewer, member, maintainer; member by default); repeatable",
    )] = None,
) -> None:
    """Add a user (administrators), optionally to projects."""
    memberships = [_membership(text) for text in project or ()]
    password = None if no_password else _password(password_stdin, f"Password for {name}", confirm=True)
    with Client() as client:
        user = client.create_user(name, password=password, admin=admin)
        for project_name, role in memberships:
            client.set_member(project_name, name, role)
    joined = "".join(f", {role} of {project_name}" for project_name, role in memberships)
    console.print(f"Added user {user.name}{' (administrator)' if user.is_admin else ''}{joined}")


def _membership(text: str) -> tuple[str, str]:
    project, _, role = text.partition(":")
    role = role or "member"
    if not project or role not in ("viewer", "member", "maintainer"):
        raise UsageError(f"--project {text!r}: write PROJECT or PROJECT:ROLE, the role one of viewer, member, "
                         "maintainer")
    return project, role


@users_app.command("passwd")
def set_password(
    name: Annotated[str | None, typer.Argument(help="whose (default: yours; others' for administrators)")] = None,
    password_stdin: PasswordStdin = False,
) -> None:
    """Set a password: your own (asks for the current one), or another user's as an administrator."""
    with Client() as client:
        me = client.whoami()
        name = name or me.name
        current = None
        if name == me.name and me.has_password and not password_stdin:
            current = typer.prompt("Current password", hide_input=True)
        elif name == me.name and me.has_password:
            current = sys.stdin.readline().rstrip("\r\n")
        password = _password(password_stdin, f"New password for {name}", confirm=True)
        client.set_password(name, password, current_password=current)
    console.print(f"Password of {name} set")


def _tokens_table(tokens: list[TokenInfo]) -> Table:
    table = Table("ID", "Name", "Kind", "User", "Created", "Expires")
    for token in tokens:
        table.add_row(str(token.id), token.name, token.kind, token.user, _when(token.created_at),
                      _when(token.expires_at))
    return table


@tokens_app.callback(invoke_without_command=True)
def tokens(
    context: typer.Context,
    every_user: Annotated[bool, typer.Option("--all", help="everyone's (administrators)")] = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """List your tokens in force (never their secrets)."""
    if context.invoked_subcommand is not None:
        return
    with Client() as client:
        found = client.tokens(every_user=every_user)
    if output is OutputFormat.json:
        print_json(found)
    else:
        console.print(_tokens_table(found))


@tokens_app.command("create")
def create_token(
    name: Annotated[str, typer.Argument(help="what it is for, e.g. laptop or ci")],
    expires: Expires = None,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Create a token; its secret is printed this once (use it as MLYARD_TOKEN)."""
    with Client() as client:
        issued = client.create_token(name, expires_in=_lifetime(expires))
    if output is OutputFormat.json:
        print_json(issued)
        return
    console.print(f"Token {issued.info.id} ({name}), expires {_when(issued.info.expires_at)}. "
                  "Copy it now: it is not shown again.")
    print(issued.token)


@tokens_app.command("revoke")
def revoke_token(token_id: Annotated[int, typer.Argument(help="the token's ID (mlyard tokens)", min=1)]) -> None:
    """Revoke a token; it stops working at once."""
    with Client() as client:
        token = client.revoke_token(token_id)
    console.print(f"Token {token.id} ({token.name}) revoked")
