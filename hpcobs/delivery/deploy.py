"""`build.py deploy`: this build's folder, datasources and dashboards into a running Grafana through its HTTP API
(docs/deploy.md).

What a fresh build of --config produces is deployed, not the files in out/: the two agree whenever out/ is
current (`build.py check`), and a deploy cannot push a stale tree. hpcobs owns a dashboard that carries the tag
`hpcobs` and a uid starting with `hpcobs-`; it never overwrites or deletes any other.

Each dashboard is sent with the SHA-256 of the JSON the build made, under the top-level key `hpcobs`: Grafana
stores the JSON model as given and returns it whole, so the next deploy compares digests and skips what is
unchanged, without a write. Writes carry the version just read instead of `overwrite: true`: Grafana then
refuses (412) rather than replace an edit made in between, and never lets a dashboard take over another one
that shares its title, which `overwrite` does on Grafana before 11.

grafana-client is imported only when the command runs (hpcobs.delivery.grafana_api), so a build never loads it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shlex
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import yaml

from hpcobs.build import pipeline
from hpcobs.delivery.endpoint import PROVISIONED, Endpoint, Failure
from hpcobs.errors import UserError
from hpcobs.paths import ROOT
from hpcobs.settings import config as config_module
from hpcobs.settings.config import Config
from hpcobs.targets.dashboards import folder_dir
from hpcobs.targets.provisioning import DATASOURCES_FILE

if TYPE_CHECKING:
    from hpcobs.delivery.grafana_api import Grafana

OWNER_TAG = "hpcobs"
UID_PREFIX = "hpcobs-"
# The top-level key of a deployed dashboard's JSON model that holds the digest of what the build produced.
MARK = "hpcobs"
# What Grafana itself writes into the stored JSON model on each save; everything else is what deploy sent.
GRAFANA_KEYS = (MARK, "id", "version")
# A datasource keeps these settings from Grafana when deploy updates it: the build does not set them, and
# Grafana's update replaces the whole datasource. Its secrets (secureJsonData) are kept by Grafana itself.
KEPT_DATASOURCE_FIELDS = ("user", "database", "basicAuth", "basicAuthUser", "withCredentials", "isDefault")
# Attempts after the first, for a deploy that writes: a Grafana restart takes seconds. A dry run reads only, so
# it fails at once and is simply rerun.
RETRIES = 3
Result = TypeVar("Result")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `build.py deploy`."""
    parser.add_argument(
        "--url",
        metavar="URL",
        help="Grafana's root URL, with its sub-path if it is served under one: https://grafana.example.org, "
        "https://example.org/grafana (default: grafana.url of the --config site file; one of the two is required)",
    )
    token = parser.add_mutually_exclusive_group()
    token.add_argument(
        "--token-file",
        metavar="FILE",
        help="file holding a Grafana service account token (Editor role, Admin to manage datasources too); the "
        "token is never taken from the command line, where other users and shell history see it",
    )
    token.add_argument("--token-env", metavar="VAR", help="environment variable holding the token")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="read Grafana and print what would change, with each updated dashboard's semantic diff; write nothing",
    )
    parser.add_argument(
        "--prune",
        action="store_true",
        help=f"delete the dashboards hpcobs owns (tag {OWNER_TAG}, uid {UID_PREFIX}*) that this build no longer makes",
    )
    parser.add_argument(
        "--skip-datasources",
        action="store_true",
        help="leave Grafana's datasources alone (provisioned by file, or managed by someone else); a token with "
        "the Editor role is then enough, as Editors cannot manage datasources",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain http to a host that is not this machine (the token then crosses the network unencrypted)",
    )
    parser.add_argument(
        "--timeout", type=_positive(float), default=10.0, metavar="SECONDS", help="per request (default 10)"
    )
    parser.add_argument(
        "--retries",
        type=_positive(int, zero=True),
        metavar="N",
        help=f"attempts after the first on 5xx, timeouts and refused connections (default {RETRIES}; 0 with "
        "--dry-run, which writes nothing and is rerun at no cost)",
    )
    parser.add_argument(
        "--backoff",
        type=_positive(float),
        default=1.0,
        metavar="SECONDS",
        help="wait before the first retry, doubled before each next one, at most 10 s (default 1)",
    )


def _positive(kind: type, zero: bool = False) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{text!r} is not {'zero or more' if zero else 'more than zero'}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its error: "invalid float value"
    return parse


def run(args: argparse.Namespace) -> int:
    config = config_module.load(args.config)
    endpoint = grafana_endpoint(args.url, config, args.insecure)
    token = read_token(args.token_file, args.token_env)
    build = Build.of(config, pipeline.generate(config))
    if args.skip_datasources:
        build = dataclasses.replace(build, datasources=[])
    from hpcobs.delivery import grafana_api

    retries = args.retries if args.retries is not None else 0 if args.dry_run else RETRIES
    grafana = grafana_api.Grafana(endpoint, token, args.timeout, retries, args.backoff)
    output = Output(token)
    report = Report(output, endpoint.url, args.dry_run, skipped=("datasource",) if args.skip_datasources else ())
    Deployment(grafana, build, report, args.dry_run, args.prune, source_revision()).run()
    output.line(report.summary())
    if report.failed:
        output.line(report.incomplete(), sys.stderr)
        return 1
    return 0


def grafana_endpoint(url: str | None, config: Config, insecure: bool) -> Endpoint:
    """--url, else the site file's grafana.url (the root the alerts' dashboard links start with). The one in
    config/default.yaml (http://grafana:3000) stands for the site's and is never sent a token."""
    if url:
        return Endpoint.parse(url, insecure)
    if config.site_sets("grafana", "url"):
        site = config.origin[-1]
        return Endpoint.parse(config.get("grafana", "url"), insecure, f"grafana.url of {site}")
    where = config.origin[-1] if len(config.origin) > 1 else "the site file (--config FILE)"
    raise UserError(
        f"deploy error: no Grafana URL; set grafana.url in {where}, or pass --url (e.g. https://grafana.example.org)"
    )


def read_token(token_file: str | None, token_env: str | None) -> str:
    """The service account token from a file or an environment variable; never echoed, even in part."""
    if token_file:
        source = f"--token-file {token_file}"
        text = _read_token_file(token_file, source)
    elif token_env:
        source = f"--token-env {token_env}"
        text = os.environ.get(token_env, "")
    else:
        raise UserError(
            "deploy error: no token; pass --token-file FILE or --token-env VAR holding a Grafana service account "
            "token with the Editor role (docs/deploy.md#token)"
        )
    token = text.strip()
    if not token:
        raise UserError(f"deploy error: {source}: empty or unset; it must hold the service account token")
    if not token.isprintable() or any(character.isspace() for character in token):
        raise UserError(
            f"deploy error: {source}: holds more than one token (spaces, several lines or control characters); "
            "keep only the token"
        )
    return token


def _read_token_file(token_file: str, source: str) -> str:
    """The file's text, if it is a regular file that only its owner can read or change. A symlink is followed and
    the file it names is checked: a link's own mode means nothing on Linux."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below. The checks look at the open
        # file (fstat), so it cannot be swapped for another between the check and the read.
        fd = os.open(token_file, os.O_RDONLY | os.O_NONBLOCK)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise UserError(
                    f"deploy error: {source}: not a regular file; write the token to a file only you can read "
                    "(chmod 600), or pass it with --token-env"
                )
            if mode & 0o077:
                raise UserError(
                    f"deploy error: {source}: mode {stat.S_IMODE(mode):04o} lets other users read or change the "
                    f"token; run chmod 600 {shlex.quote(token_file)}"
                )
            with open(fd, "rb", closefd=False) as handle:
                return handle.read().decode("utf-8")
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise UserError(
            f"deploy error: {source}: file not found; write the token to it (docs/deploy.md#token)"
        ) from None
    except UnicodeDecodeError:
        raise UserError(f"deploy error: {source}: not UTF-8 text; it must hold only the token") from None
    except OSError as exc:
        raise UserError(f"deploy error: {source}: cannot read it ({exc.strerror}); make it readable") from None


def source_revision() -> str:
    """The commit this build comes from, for Grafana's version history: "1a2b3c4d5e6f (clean)", "(dirty)" when
    tracked files differ from it, "unknown" outside a git checkout."""
    git = ["git", "-C", str(ROOT), "--no-optional-locks"]  # read only: never takes the index lock
    try:
        commit = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=20)
        status = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if commit.returncode or status.returncode:
        return "unknown"
    return f"{commit.stdout.strip()} ({'dirty' if status.stdout.strip() else 'clean'})"


def digest(model: dict) -> str:
    """SHA-256 of a dashboard's JSON model in a canonical form: sorted keys, and whole numbers as integers, as
    Grafana's JSON encoder writes 1.0 back as 1."""
    canonical = json.dumps(_whole_numbers(model), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _whole_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def _literal(value: Any) -> Any:
    """A provisioning-file value as the API must receive it: Grafana expands $NAME in provisioning files, so the
    build writes each $ as $$ there (hpcobs.lang.escape.grafana_provisioning); the API expands nothing."""
    if isinstance(value, str):
        return value.replace("$$", "$")
    if isinstance(value, dict):
        return {key: _literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_literal(item) for item in value]
    return value


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    model: dict
    digest: str


@dataclass(frozen=True)
class Build:
    """What a deploy puts into Grafana: the folder, the datasources of the provisioning file, the dashboards."""

    folder_uid: str
    folder_title: str
    datasources: list[dict]
    dashboards: list[Dashboard]

    @classmethod
    def of(cls, config: Config, files: dict[str, str]) -> Build:
        folder = config.get("grafana", "folder")
        models = [json.loads(text) for path, text in files.items() if path.startswith(folder_dir(config))]
        dashboards = [Dashboard(m["uid"], m["title"], m, digest(m)) for m in sorted(models, key=lambda m: m["uid"])]
        provisioned = yaml.safe_load(files[DATASOURCES_FILE])["datasources"]
        return cls(config.get("grafana", "folder_uid"), folder, [_literal(ds) for ds in provisioned], dashboards)


class Output:
    """Every line deploy prints, with the token replaced wherever it came from (a proxy or a Grafana error may
    echo the Authorization header back)."""

    def __init__(self, token: str):
        self.token = token

    def line(self, text: str, stream: TextIO | None = None) -> None:
        print(text.replace(self.token, "<token>"), file=stream or sys.stdout, flush=True)


# Actions, as planned; a deploy reports the ones that write in the past tense.
CREATE = "create"
UPDATE = "update"
UNCHANGED = "unchanged"
DELETE = "delete"
STALE = "stale"
FAILED = "failed"
NOT_APPLIED = "not applied"
WRITES = (CREATE, UPDATE, DELETE)
PAST = {CREATE: "created", UPDATE: "updated", DELETE: "deleted"}
ORDER = (CREATE, UPDATE, UNCHANGED, DELETE, STALE)


@dataclass(frozen=True)
class Row:
    """One line of the report: what happened to one object (or, for kind "grafana", to the connection)."""

    kind: str
    uid: str
    title: str
    action: str
    note: str = ""
    details: tuple[str, ...] = ()


class Report:
    """The rows, printed as they happen (a deploy stopped halfway has shown what it applied), and a summary."""

    def __init__(self, output: Output, url: str, dry_run: bool, skipped: tuple[str, ...] = ()):
        self.output, self.url, self.dry_run, self.skipped = output, url, dry_run, skipped
        self.rows: list[Row] = []

    def add(self, row: Row) -> None:
        self.rows.append(row)
        title = f" ({row.title})" if row.title else ""
        note = f": {row.note}" if row.note else ""
        self.output.line(f"{self._word(row.action):<11} {row.kind:<10} {row.uid}{title}{note}")
        for detail in row.details:
            self.output.line(f"    {detail}" if detail else "")

    def add_not_applied(self, rows: list[Row], why: str) -> None:
        """What a failure leaves undone, in one line with the URL and the count ("not applied 10 items (1 folder,
        4 datasources, 5 dashboards) to URL: why"), never a line per object; the rows still count in the summary."""
        if not rows:
            return
        self.rows.extend(rows)
        kinds = [_count(n, kind) for kind, n in Counter(row.kind for row in rows).items()]
        what = kinds[0] if len(kinds) == 1 else f"{_count(len(rows), 'item')} ({', '.join(kinds)})"
        self.output.line(f"{NOT_APPLIED:<11} {what} to {self.url}: {why}")

    @property
    def failed(self) -> int:
        return sum(row.action == FAILED for row in self.rows)

    def _word(self, action: str) -> str:
        return action if self.dry_run else PAST.get(action, action)

    def summary(self) -> str:
        """The last line, e.g. "deploy to URL: 1 folder ensured, 4 datasources unchanged, 2 dashboards created,
        3 unchanged, 0 failed"."""
        parts = [self._tally(kind) for kind in ("folder", "datasource", "dashboard")]
        missing = sum(row.action == NOT_APPLIED for row in self.rows)
        tail = f", {missing} not applied" if missing else ""
        head = f"dry run against {self.url}, nothing written" if self.dry_run else f"deploy to {self.url}"
        return f"{head}: {', '.join(parts)}, {self.failed} failed{tail}"

    def _tally(self, kind: str) -> str:
        if kind in self.skipped:
            return f"{kind}s skipped"
        counts = Counter(row.action for row in self.rows if row.kind == kind and row.action in ORDER)
        if kind == "folder" and not self.dry_run and sum(counts.values()) == 1 and not counts[STALE]:
            return "1 folder ensured"
        parts = [f"{counts[action]} {self._tally_word(action)}" for action in ORDER if counts[action]]
        if not parts:
            return f"0 {kind}s"
        first_count = counts[next(action for action in ORDER if counts[action])]
        parts[0] = parts[0].replace(" ", f" {kind}{'s' if first_count != 1 else ''} ", 1)
        return ", ".join(parts)

    def _tally_word(self, action: str) -> str:
        if action in WRITES:
            return f"to {action}" if self.dry_run else PAST[action]
        return action

    def incomplete(self) -> str:
        """After a failure: exactly what was applied and what was not, in one line."""
        if self.dry_run:
            return f"dry run incomplete: {self.failed} failed; nothing was written"
        applied = [f"{PAST[row.action]} {row.kind} {row.uid}" for row in self.rows if row.action in WRITES]
        if not applied:
            return "deploy incomplete: nothing applied; fix the failure and rerun"
        missing = [
            f"{row.kind} {row.uid}{' (failed)' if row.action == FAILED else ''}"
            for row in self.rows
            if row.action in (FAILED, NOT_APPLIED) and row.kind != "grafana"
        ]
        return (
            f"deploy incomplete: applied {', '.join(applied) or 'nothing'}; not applied: "
            f"{', '.join(missing) or 'nothing'}; fix the failure and rerun, which skips what is already in place"
        )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number != 1 else ''}"


class Stop(Exception):
    """A fatal failure: the objects not handled yet are reported as not applied."""


@dataclass
class Attempt:
    """What an earlier attempt of the same step wrote before its answer was lost: a retry that then finds the
    object as wanted reports that write, not "unchanged"."""

    sent: str | None = None

    def found_unchanged(self) -> Outcome:
        return Outcome(self.sent or UNCHANGED)


@dataclass(frozen=True)
class Outcome:
    action: str
    note: str = ""
    details: tuple[str, ...] = ()


class Deployment:
    """Folder, then datasources, then dashboards, then the owned dashboards the build no longer makes."""

    def __init__(
        self, grafana: Grafana, build: Build, report: Report, dry_run: bool, prune: bool, revision: str
    ) -> None:
        self.grafana, self.build, self.report = grafana, build, report
        self.dry_run, self.prune, self.revision = dry_run, prune, revision
        self.pending: list[tuple[str, str, str]] = [
            ("folder", build.folder_uid, build.folder_title),
            *(("datasource", ds["uid"], ds["name"]) for ds in build.datasources),
            *(("dashboard", d.uid, d.title) for d in build.dashboards),
        ]

    def run(self) -> None:
        try:
            version = self._guard("grafana", self.report.url, "", self.grafana.health, fatal=True).get("version")
            verb = "dry run against" if self.dry_run else "deploy to"
            self.report.output.line(f"{verb} {self.report.url} (Grafana {version}) as hpcobs {self.revision}")
            folder_ready = self._step("folder", self.build.folder_uid, self.build.folder_title, self._folder)
            for datasource in self.build.datasources:
                self._step("datasource", datasource["uid"], datasource["name"], self._datasource(datasource))
            if not folder_ready:
                self._not_applied("dashboard", "its folder is not in place")
                return
            for dashboard in self.build.dashboards:
                self._step("dashboard", dashboard.uid, dashboard.title, self._dashboard(dashboard))
            self._stale_dashboards()
        except Stop:
            self._not_applied("", "deploy stopped at the failure above")

    def _not_applied(self, kind: str, why: str) -> None:
        """The pending objects (of `kind`, or all), reported as one line."""
        left = [item for item in self.pending if not kind or item[0] == kind]
        self.pending = [item for item in self.pending if item not in left]
        self.report.add_not_applied([Row(*item, NOT_APPLIED, why) for item in left], why)

    def _add(self, row: Row) -> None:
        if (row.kind, row.uid, row.title) in self.pending:
            self.pending.remove((row.kind, row.uid, row.title))
        self.report.add(row)

    def _guard(self, kind: str, uid: str, title: str, call: Callable[[], Result], fatal: bool = False) -> Result:
        """Run a step with retries; a failure becomes a row, and a fatal one (or any, with `fatal`) stops the
        deploy."""
        try:
            return self.grafana.attempt(call)
        except Failure as failure:
            self._add(Row(kind, uid, title, FAILED, failure.line))
            if failure.fatal or fatal:
                raise Stop from None
            raise
        except Exception as exc:  # noqa: BLE001 - an odd answer ends as a line, never as a traceback
            self._add(Row(kind, uid, title, FAILED, f"unexpected answer from Grafana ({type(exc).__name__}: {exc})"))
            raise Stop from None

    def _step(self, kind: str, uid: str, title: str, step: Callable[[Attempt], Outcome]) -> bool:
        """One object: read it, write it when it differs; True when it is in place (or would be, in a dry run)."""
        attempt = Attempt()
        try:
            outcome = self._guard(kind, uid, title, lambda: step(attempt))
        except Failure:
            return False
        self._add(Row(kind, uid, title, outcome.action, outcome.note, outcome.details))
        return True

    def _write(self, attempt: Attempt, action: str, write: Callable[[], object]) -> None:
        if not self.dry_run:
            attempt.sent = action
            write()

    def _folder(self, attempt: Attempt) -> Outcome:
        uid, title = self.build.folder_uid, self.build.folder_title
        found = self.grafana.folder(uid)
        if found is None:
            self._write(attempt, CREATE, lambda: self.grafana.create_folder(uid, title))
            return Outcome(CREATE)
        if found.get("title") == title:
            return attempt.found_unchanged()
        self._write(attempt, UPDATE, lambda: self.grafana.rename_folder(uid, title, found.get("version", 0)))
        return Outcome(UPDATE, f"renamed from {found.get('title')!r}")

    def _datasource(self, wanted: dict) -> Callable[[Attempt], Outcome]:
        def step(attempt: Attempt) -> Outcome:
            uid = wanted["uid"]
            found = self.grafana.datasource(uid)
            if found is None:
                self._write(attempt, CREATE, lambda: self.grafana.create_datasource(wanted))
                return Outcome(CREATE)
            changed = _changed_settings(found, wanted)
            if not changed:
                return attempt.found_unchanged()
            differ = f"{', '.join(changed)} differ{'s' if len(changed) == 1 else ''} from this build"
            if found.get("readOnly"):
                raise Failure(
                    f"{differ}, but it is read-only in Grafana, provisioned from a file there; change that file, "
                    "or remove the datasource from it to let deploy manage it"
                )
            self._write(attempt, UPDATE, lambda: self.grafana.update_datasource(uid, _datasource_update(found, wanted)))
            return Outcome(UPDATE, differ)

        return step

    def _dashboard(self, dashboard: Dashboard) -> Callable[[Attempt], Outcome]:
        def step(attempt: Attempt) -> Outcome:
            found = self.grafana.dashboard(dashboard.uid)
            if found is None:
                self._write(attempt, CREATE, lambda: self.grafana.save_dashboard(self._saved(dashboard, None), True))
                return Outcome(CREATE)
            stored, meta = found["dashboard"], found.get("meta", {})
            mark = stored.get(MARK) if isinstance(stored.get(MARK), dict) else {}
            if meta.get("provisioned"):
                raise Failure(PROVISIONED)
            if OWNER_TAG not in stored.get("tags", []) and not mark:
                raise Failure(
                    f"a dashboard with this uid exists in Grafana without the {OWNER_TAG!r} tag, so hpcobs does "
                    f"not own it and leaves it as it is; delete it, or tag it {OWNER_TAG!r} to let deploy replace it"
                )
            content = {key: value for key, value in stored.items() if key not in GRAFANA_KEYS}
            edited = mark.get("sha256") != digest(content)
            moved = meta.get("folderUid") != self.build.folder_uid
            if mark.get("sha256") != dashboard.digest:
                note = ""  # the build changed it
            elif edited:
                note = "changed in Grafana since the last deploy"
            elif moved:
                note = f"moved into folder {self.build.folder_uid}"
            else:
                return attempt.found_unchanged()
            details = tuple(_semantic_diff(content, dashboard.model)) if self.dry_run else ()
            version = stored.get("version")
            self._write(attempt, UPDATE, lambda: self.grafana.save_dashboard(self._saved(dashboard, version), False))
            return Outcome(UPDATE, note, details)

        return step

    def _saved(self, dashboard: Dashboard, version: int | None) -> dict:
        """The body of POST /api/dashboards/db: the model with its digest; the version read, when it exists."""
        model = {**dashboard.model, MARK: {"sha256": dashboard.digest, "revision": self.revision}}
        if version is not None:
            model["version"] = version
        return {
            "dashboard": model,
            "folderUid": self.build.folder_uid,
            "message": f"hpcobs {self.revision}",
            "overwrite": False,
        }

    def _stale_dashboards(self) -> None:
        """Dashboards hpcobs owns that this build no longer makes: listed, deleted with --prune."""
        built = {dashboard.uid for dashboard in self.build.dashboards}
        try:
            hits = self._guard("search", OWNER_TAG, "", lambda: list(self.grafana.search_dashboards(OWNER_TAG)))
        except Failure:
            return
        stale = sorted(
            (hit for hit in hits if _owned(hit) and hit["uid"] not in built),
            key=lambda hit: hit["uid"],
        )
        for hit in stale:
            uid, title = hit["uid"], hit.get("title", "")
            if not self.prune:
                self._add(Row("dashboard", uid, title, STALE, "no longer built; --prune deletes it"))
            elif self.report.failed:
                self._add(Row("dashboard", uid, title, NOT_APPLIED, "not pruned after the failure above"))
            else:
                self._step("dashboard", uid, title, self._delete(uid))

    def _delete(self, uid: str) -> Callable[[Attempt], Outcome]:
        def step(attempt: Attempt) -> Outcome:
            self._write(attempt, DELETE, lambda: self.grafana.delete_dashboard(uid))
            return Outcome(DELETE, "no longer built")

        return step


def _owned(hit: dict) -> bool:
    """hpcobs's dashboards carry its tag and its uid prefix; one with only one of them is someone else's."""
    return OWNER_TAG in hit.get("tags", []) and str(hit.get("uid", "")).startswith(UID_PREFIX)


def _changed_settings(found: dict, wanted: dict) -> list[str]:
    """The settings the build makes that Grafana holds otherwise; settings the build does not make are left."""
    changed = [key for key, value in wanted.items() if key != "jsonData" and found.get(key) != value]
    held = found.get("jsonData") or {}
    return changed + [f"jsonData.{key}" for key, value in wanted.get("jsonData", {}).items() if held.get(key) != value]


def _datasource_update(found: dict, wanted: dict) -> dict:
    body = {key: found[key] for key in KEPT_DATASOURCE_FIELDS if key in found}
    body.update(wanted)
    body["jsonData"] = {**(found.get("jsonData") or {}), **wanted.get("jsonData", {})}
    # Grafana refuses (409) an update whose version is older than the one it holds: an edit made in between.
    body["version"] = found.get("version", 0)
    return body


def _semantic_diff(old: dict, new: dict) -> list[str]:
    from hpcobs.delivery.review import compare_dashboards

    return compare_dashboards(old, new)
