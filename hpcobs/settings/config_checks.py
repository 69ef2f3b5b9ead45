"""What the config must satisfy beyond JSON Schema's vocabulary, checked when it is loaded.

FORMATS checks single values against the grammar of the language they end up in; config/schema.json names
the grammar of each key with `"format"` (duration, re2, label-name, promql-selector, text, path-segment,
http-url, base-url, webhook-url, secret-file, email, email-list, host-port, host-name, hostlist, alert-matcher,
template-path, time-zone; sensor-path, cidr and cgroup-fragment from hpcobs.security.names; dcgm-release, a
dcgm-exporter family or release, from the catalogue). problems() checks what relates several keys or needs the
catalogue, and numbers YAML can make non-finite; conflicts() what keys get wrong together, which the file setting any
of them can fix.

Every failure reads "problem; fix" for one key path; hpcobs.settings.config names the file that set the key (for a
conflict, the last file that sets any of its keys).
"""

from __future__ import annotations

import difflib
import email.utils
import ipaddress
import math
import re
import string
import unicodedata
import zoneinfo
from collections.abc import Callable, Collection, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import jsonschema

from hpcobs.exporters import catalogue, releases
from hpcobs.exporters.sources import GPU_ROLES
from hpcobs.lang import escape, hostlist, promql, promregex, sensor_values
from hpcobs.lang.selectors import Matcher, alertmanager_matchers, parse_selector, scrape_labels
from hpcobs.settings.names import INHIBIT_ONLY_RECEIVER, DashboardUid, Team

KeyPath = list[Any]
FORMATS = jsonschema.FormatChecker(formats=())


def _format(name: str) -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    """Register a check of string values (raising ValueError "problem; fix"); other types are the schema's
    `type` to refuse."""

    def register(check: Callable[[str], None]) -> Callable[[str], None]:
        def run(value: Any) -> bool:
            if isinstance(value, str):
                check(value)
            return True

        FORMATS.checks(name, raises=ValueError)(run)
        return check

    return register


# Line breaks, control and format characters (bidi overrides, zero-width): invisible or line-breaking in
# every output, and no name, URL or regex needs them.
_CONTROL = ("Cc", "Cf", "Zl", "Zp", "Cs")


def _control_character(text: str) -> str | None:
    return next((f"U+{ord(ch):04X}" for ch in text if unicodedata.category(ch) in _CONTROL), None)


def _no_control_character(text: str, what: str) -> None:
    found = _control_character(text)
    if found:
        raise ValueError(
            f"{what} contains the control character {found} (a line break, tab or invisible character); remove it"
        )


@_format("duration")
def _duration(text: str) -> None:
    promql.duration_seconds(text)


@_format("re2")
def _re2(text: str) -> None:
    _no_control_character(text, "the regex")
    problem = promregex.problem(text)
    if problem:
        raise ValueError(problem)


@_format("label-name")
def _label_name(text: str) -> None:
    if not escape.LABEL_NAME.fullmatch(text):
        raise ValueError(
            f"{text!r} is not a Prometheus label name; use letters, digits and _, not starting "
            "with a digit (e.g. cluster)"
        )
    if text.startswith("__"):
        raise ValueError(f"{text!r} is reserved (names starting with __ are Prometheus' own); choose another name")


@_format("promql-selector")
def _selector(text: str) -> None:
    _no_control_character(text, "the selector")
    matchers = parse_selector(text)
    for matcher in matchers:
        if matcher.label.startswith("__") or not escape.LABEL_NAME.fullmatch(matcher.label):
            raise ValueError(
                f"matches on {matcher.label!r}, which is reserved or not a label name (the metric "
                'name comes from the catalogue); select by an ordinary label, e.g. job="dcgm-exporter"'
            )
        _no_control_character(matcher.value, f"the value of {matcher.label}")
        problem = promregex.problem(matcher.value) if matcher.op in ("=~", "!~") else None
        if problem:
            raise ValueError(problem)
    scrape_labels(matchers)


@_format("text")
def _text(text: str) -> None:
    if not text:
        raise ValueError("the value is empty; write a name")
    _no_control_character(text, repr(text))
    if text != text.strip():
        raise ValueError(f"{text!r} starts or ends with a space; remove it")


_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}")


@_format("path-segment")
def _path_segment(text: str) -> None:
    """A directory name under out/: one segment that cannot climb, hide or be read as a path."""
    if not _SEGMENT.fullmatch(text) or text[-1] in " .":
        raise ValueError(
            f"{text!r} is not one plain directory name; write 1-64 letters, digits, spaces, '.', '_' "
            "or '-', starting with a letter or digit and not ending with a space or '.' (e.g. HPC)"
        )


@_format("secret-file")
def _secret_file(text: str) -> None:
    # The value is not echoed: a careless value here is often the secret itself.
    if not text.startswith("/") or _control_character(text):
        raise ValueError(
            "the value is not an absolute file path; write the path of the file that holds the secret "
            "(e.g. /etc/alertmanager/secrets/slack), never the secret itself"
        )


# RFC 3986: unreserved, reserved and the % of %XX escapes. Everything else (spaces, quotes, braces,
# backslashes, non-ASCII) must be percent-encoded to appear in a URL.
_URL_CHARACTERS = frozenset(string.ascii_letters + string.digits + "-._~:/?#[]@!$&'()*+,;=%")
_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def _url(text: str, what: str) -> Any:
    """urlsplit() of an http(s) URL with only RFC 3986 characters, a host, a valid port and no credentials.
    Problems never echo the URL: it may carry a secret."""
    bad = next((ch for ch in text if ch not in _URL_CHARACTERS), None)
    if bad is not None:
        shown = repr(bad) if bad.isprintable() else f"U+{ord(bad):04X}"
        raise ValueError(
            f"{what} contains {shown}, which a URL cannot carry as is; percent-encode it "
            f"({''.join(f'%{b:02X}' for b in bad.encode())}) or remove it"
        )
    if re.search(r"%(?![0-9A-Fa-f]{2})", text):
        raise ValueError(f"{what} has a % that does not start a %XX escape; write %25 for a literal %")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{what} is not an http:// or https:// URL; write e.g. https://host.example.org:443/path")
    if "@" in parts.netloc:
        raise ValueError(
            f"{what} carries credentials (user:password@); remove them, the URL is written into the generated files"
        )
    host = parts.hostname or ""
    valid_host = _HOST_NAME.fullmatch(host) is not None
    if parts.netloc.startswith("["):
        try:
            valid_host = isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
        except ValueError:
            valid_host = False
    if not valid_host:
        raise ValueError(f"{what} has no valid host; write a host name or IP address, e.g. https://host.example.org")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError(f"{what} has an invalid port; write a number from 1 to 65535")
    return parts


@_format("http-url")
def _http_url(text: str) -> None:
    _url(text, "the URL")
    if "?" in text or "#" in text:
        raise ValueError(
            "the URL has a query or fragment (? or #), which would sit before the paths appended to it; remove it"
        )


@_format("base-url")
def _base_url(text: str) -> None:
    """A URL that hpcobs appends paths to (/d/<uid>, /<runbook>.md#<alert>)."""
    _http_url(text)
    if text.endswith("/"):
        raise ValueError("the URL ends with /; remove it (hpcobs appends /<path> to it)")


_RELAY = (
    "point webhook_url at a relay that holds it, authenticated by a token in webhook_credentials_file "
    "(sent as the Authorization header)"
)
# Services whose incoming-webhook URL is itself the credential: (domain, path prefix, what it is; fix).
_SECRET_WEBHOOKS = (
    (
        "hooks.slack.com",
        "",
        "a Slack incoming-webhook URL, itself a secret; use a receiver with slack_api_url_file "
        "(a file holding the URL) and slack_channel instead",
    ),
    ("webhook.office.com", "", f"a Microsoft Teams webhook URL, itself a secret; {_RELAY}"),
    ("outlook.office.com", "/webhook", f"a Microsoft Teams webhook URL, itself a secret; {_RELAY}"),
    ("logic.azure.com", "", f"a Teams workflow (Power Automate) URL, itself a secret; {_RELAY}"),
    ("discord.com", "/api/webhooks", f"a Discord webhook URL, itself a secret; {_RELAY}"),
    ("discordapp.com", "/api/webhooks", f"a Discord webhook URL, itself a secret; {_RELAY}"),
)
# A path segment that reads as a token: a run of 20 or more letters and digits with both in it (Slack's
# B0123/XXXX, API keys, base64), or a UUID.
_TOKEN = re.compile(
    r"(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{20,}"
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


@_format("webhook-url")
def _webhook_url(text: str) -> None:
    """A webhook URL is written into the committed alertmanager.yml: it must not be a credential itself."""
    parts = _url(text, "the webhook URL")
    host = (parts.hostname or "").rstrip(".")
    for domain, path, kind in _SECRET_WEBHOOKS:
        if (host == domain or host.endswith("." + domain)) and parts.path.startswith(path):
            raise ValueError(f"the webhook URL is {kind}")
    if parts.query or "?" in text or parts.fragment:
        raise ValueError(
            "the webhook URL has a query string or fragment, where tokens travel; remove it and put "
            "the token in webhook_credentials_file (sent as the Authorization header)"
        )
    for number, segment in enumerate(unquote(parts.path).split("/")[1:], start=1):
        if _TOKEN.search(segment):
            raise ValueError(
                f"path segment {number} of the webhook URL looks like a token (20+ letters and digits, "
                "or a UUID); remove it and put the token in webhook_credentials_file (sent as the "
                "Authorization header)"
            )


# RFC 5322 dot-atom local part (no quoted strings or comments) at a host name.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_ADDRESS = re.compile(rf"{_ATEXT}(\.{_ATEXT})*@{_HOST_NAME.pattern}")


@_format("email")
def _email(text: str) -> None:
    name, address = email.utils.parseaddr(text)
    if (
        not _ADDRESS.fullmatch(address)
        or text not in (address, f"{name} <{address}>")
        or _control_character(text)
        or '"' in name
    ):
        raise ValueError(
            f"{text!r} is not an e-mail address; write e.g. alerts@example.org "
            "(or Name <alerts@example.org> for smtp_from)"
        )


@_format("email-list")
def _email_list(text: str) -> None:
    """Alertmanager's `to`: one address, or several separated by commas."""
    for address in text.split(","):
        if not _ADDRESS.fullmatch(address.strip()):
            raise ValueError(
                f"{address.strip()!r} is not an e-mail address; write e.g. team@example.org, "
                "several separated by commas"
            )


@_format("host-port")
def _host_port(text: str) -> None:
    host, _, port = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        valid_host = ipaddress.ip_address(host[1:-1]).version == 6 if bracketed else bool(_HOST_NAME.fullmatch(host))
    except ValueError:
        valid_host = False
    if not valid_host or not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        raise ValueError(
            f"{text!r} is not host:port; write e.g. mail-relay.example.org:25 (port 1-65535, [::1]:25 for IPv6)"
        )


@_format("host-name")
def host_name(text: str) -> None:
    """A host name as DNS and Slurm write it: it becomes part of a scrape target and of `instance`."""
    if not _HOST_NAME.fullmatch(text):
        raise ValueError(f"{text!r} is not a host name; write letters, digits, '-' and '.' (e.g. gpu001)")


@_format("hostlist")
def _hostlist(text: str) -> None:
    for name in hostlist.expand(text):
        host_name(name)


@_format("alert-matcher")
def _alert_matcher(text: str) -> None:
    """One Alertmanager matcher (`node=~"gpu0[0-4].*"`), read as PromQL reads it: a label name, an operator and a
    quoted value, a regex checked as RE2 (Alertmanager's Go regexp)."""
    _no_control_character(text, "the matcher")
    matchers = alertmanager_matchers(text)
    if len(matchers) != 1:
        raise ValueError(f'{text!r} is {len(matchers)} matchers; write one per item (e.g. node=~"gpu0[0-4].*")')
    _label_name(matchers[0].label)
    if matchers[0].op in ("=~", "!~"):
        _re2(matchers[0].value)


@_format("template-path")
def _template_path(text: str) -> None:
    """A template file or directory of alertmanager.yml's `templates` (a glob Alertmanager resolves relative to the
    config file's directory when not absolute)."""
    _text(text)
    if text.endswith("/") and text != "/":
        raise ValueError(f"{text!r} ends with '/'; write the path without it")


@_format("time-zone")
def _time_zone(text: str) -> None:
    """A time interval's `location`: a name of the IANA database Alertmanager loads (Go's time.LoadLocation)."""
    if text not in ("UTC", "Local"):
        try:
            zoneinfo.ZoneInfo(text)
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            raise ValueError(f"{text!r} is not an IANA time zone; write e.g. Europe/Berlin, UTC or Local") from None


def route_matchers(route: dict) -> list[Matcher]:
    """A route's matchers, in the order the site wrote them: `match` (equality), `match_re` (regex), `matchers`."""
    return [
        *(Matcher(label, "=", value) for label, value in sorted(route.get("match", {}).items())),
        *(Matcher(label, "=~", value) for label, value in sorted(route.get("match_re", {}).items())),
        *(alertmanager_matchers(text)[0] for text in route.get("matchers", [])),
    ]


def _sensor_format(name: str, problem: Callable[[str], str | None]) -> None:
    """A grammar of hpcobs.security.names: site values that reach Falco conditions, Tetragon selectors and
    bpftrace arguments, checked there by the same functions."""

    def check(text: str) -> None:
        found = problem(text)
        if found:
            raise ValueError(found)

    _format(name)(check)


_sensor_format("sensor-path", sensor_values.path_problem)
_sensor_format("cidr", sensor_values.cidr_problem)
_sensor_format("cgroup-fragment", sensor_values.cgroup_fragment_problem)


@_format(releases.config_format("dcgm"))
def _dcgm_release(text: str) -> None:
    """An item of exporters.dcgm.versions: a family, or a release that maps to one (hpcobs.exporters.releases). The
    catalogue is read on the first check, not on import."""
    covered = catalogue.load()["dcgm"].releases
    assert covered is not None
    covered.family(text)


def problems(doc: Any) -> list[tuple[KeyPath, str]]:
    """What relates keys to each other, or needs the catalogue: (key path, "problem; fix") each."""
    if not isinstance(doc, dict):
        return []
    return [
        *_non_finite_numbers(doc, []),
        *_windows(doc),
        *_nccl_warn_burst(doc),
        *_metric_names(doc),
        *_receivers_defined_once(doc),
        *_datasources_distinct(doc),
        *_datasources_provisioned(doc),
        *_routes_match_something(doc),
        *_time_interval_ranges(doc),
        *_folder_uid(doc),
        *_shipped_policy_name(doc),
        *_job_info_names_its_scrape_job(doc),
    ]


def conflicts(doc: Any) -> list[tuple[KeyPath, list[KeyPath], str]]:
    """What keys get wrong together: (key reported, the other keys, "problem; fix") each."""
    if not isinstance(doc, dict):
        return []
    return [
        *_receivers_referred_to(doc),
        *_time_intervals_referred_to(doc),
        *_job_info_apart_from_job_written(doc),
        *_a_gpu_exporter(doc),
        *_rules_on_shards_need_a_ruler(doc),
    ]


def _non_finite_numbers(node: Any, path: KeyPath) -> Iterator[tuple[KeyPath, str]]:
    """YAML's .nan and .inf load as floats that every number check of the schema lets through."""
    if isinstance(node, float) and not math.isfinite(node):
        yield path, f"{node} is not a finite number; write an ordinary number (e.g. 0.5)"
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _non_finite_numbers(value, path + [key])
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _non_finite_numbers(value, path + [index])


def _seconds(text: Any) -> int | None:
    try:
        return promql.duration_seconds(text) if isinstance(text, str) else None
    except ValueError:
        return None  # the schema's duration format reports it


# Thresholds that are ranges read back from now (range selectors, offsets, predict_linear's history).
_WINDOW_SUFFIXES = ("_window", "_lookback", "_horizon")


# The intervals the rules and their tests are proven at (tests/sites/): below 5s a scrape is shorter than the
# exporters' own collection period; above 2m a series vanishes from every instant query as soon as one scrape
# is late or lost, since Prometheus looks back 5m for the last sample.
_INTERVAL_RANGE = (5, 120)


def _windows(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """The scrape interval divides every schedule (rule groups, rate windows, test series); a window needs at
    least two scrapes in it, or rate(), increase() and predict_linear() return nothing and its alerts never fire."""
    interval = _seconds(doc.get("scrape_interval"))
    if interval is None:
        return
    low, high = _INTERVAL_RANGE
    if not low <= interval <= high:
        yield (
            ["scrape_interval"],
            f"{doc['scrape_interval']!r} is outside the intervals hpcobs is proven at; write from "
            f"{promql.duration(low)} to {promql.duration(high)} (e.g. 30s)",
        )
        return
    evaluation = _seconds(doc.get("evaluation_interval"))
    rate_window = promql.RATE_WINDOW_SCRAPES * interval
    if evaluation is not None and not low <= evaluation <= min(high, rate_window):
        yield (
            ["evaluation_interval"],
            f"{doc['evaluation_interval']!r} must be from {promql.duration(low)} to "
            f"{promql.duration(min(high, rate_window))}: at most the rate window "
            f"({promql.RATE_WINDOW_SCRAPES} x scrape_interval {doc['scrape_interval']}) and 2m",
        )
    elif evaluation is not None and evaluation % interval and interval % evaluation:
        yield (
            ["evaluation_interval"],
            f"{doc['evaluation_interval']!r} and scrape_interval {doc['scrape_interval']} do not divide one another, "
            "so records would read samples of uneven age; write a multiple or a divisor of scrape_interval",
        )
    thresholds = doc.get("thresholds")
    for key, value in thresholds.items() if isinstance(thresholds, dict) else ():
        # Loki's windows (log_*) count log lines, which arrive whenever they are written, not at scrapes.
        scraped = isinstance(key, str) and key.endswith(_WINDOW_SUFFIXES) and not key.startswith("log_")
        seconds = _seconds(value) if scraped else None
        if seconds is not None and seconds < 2 * interval:
            yield (
                ["thresholds", key],
                f"{value!r} holds fewer than two scrapes of scrape_interval "
                f"{doc['scrape_interval']}; write at least {promql.duration(2 * interval)}",
            )


def _nccl_warn_burst(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """TrainingNcclWarnBurst counts a window of lines: a burst stays in the count for one window, so a `for` as long
    as the window would never let it fire."""
    window = _seconds(_get(doc, "thresholds", "log_nccl_warn_window"))
    for_ = _seconds(_get(doc, "thresholds", "log_nccl_warn_for"))
    if window is not None and for_ is not None and for_ >= window:
        yield (
            ["thresholds", "log_nccl_warn_for"],
            f"{doc['thresholds']['log_nccl_warn_for']!r} is not shorter than log_nccl_warn_window "
            f"{doc['thresholds']['log_nccl_warn_window']!r}, so a burst of NCCL warnings would leave the window before "
            "TrainingNcclWarnBurst fires; write a shorter duration",
        )


def _metric_names(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    overrides = _get(doc, "exporters", "dcgm", "metric_names")
    if not isinstance(overrides, dict):
        return
    known = catalogue.load()["dcgm"].signals()
    for signal in overrides:
        if signal not in known:
            guess = difflib.get_close_matches(str(signal), known, n=1)
            hint = f"did you mean {guess[0]!r}?" if guess else "use a signal id"
            yield (
                ["exporters", "dcgm", "metric_names", signal],
                f"unknown signal; {hint} (signal ids are listed in hpcobs/exporters/catalogue/dcgm.yaml)",
            )


def _a_gpu_exporter(doc: dict) -> Iterator[tuple[KeyPath, list[KeyPath], str]]:
    """hpcobs watches GPU clusters: the fleet records, the dashboards and most alerts start from a GPU exporter's
    series, so disabling every one leaves nothing to build (a disabled exporter takes what reads it away:
    docs/configuration.md)."""
    keys = [["exporters", role, "enabled"] for role in GPU_ROLES]
    if all(_get(doc, *key) is False for key in keys):
        yield (
            keys[0],
            keys[1:],
            f"every GPU exporter is disabled ({', '.join(GPU_ROLES)}); enable the one the fleet runs "
            "(dcgm for NVIDIA, amd for AMD)",
        )


def _rules_on_shards_need_a_ruler(doc: dict) -> Iterator[tuple[KeyPath, list[KeyPath], str]]:
    """Only a full Prometheus on each shard evaluates rules: vmagent and Prometheus in agent mode store nothing
    to evaluate them on (docs/scale-out.md#rules-on-the-shards)."""
    if not _get(doc, "scale_out", "rules_on_shards"):
        return
    topology, collector = _get(doc, "scale_out", "topology"), _get(doc, "scale_out", "collector")
    if topology != "sharded" or collector != "prometheus":
        yield (
            ["scale_out", "rules_on_shards"],
            [["scale_out", "topology"], ["scale_out", "collector"]],
            f"shards evaluate rules only as full Prometheus servers (topology sharded, collector prometheus), not "
            f"with topology {topology} and collector {collector}; set both, or empty scale_out.rules_on_shards",
        )


def _receivers_defined_once(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """Receivers are referred to by name: each defined once, and none under the name the build gives its own."""
    names = _receiver_names(doc) or []
    for index, name in enumerate(names):
        if name == INHIBIT_ONLY_RECEIVER:
            yield (
                ["alertmanager", "receivers", index, "name"],
                f"receiver name {name!r} is reserved: the build routes the alerts that only inhibit others there; "
                "rename it",
            )
        elif name in names[:index]:
            yield (
                ["alertmanager", "receivers", index, "name"],
                f"receiver {name!r} is defined twice; rename one or merge them",
            )


def _receivers_referred_to(doc: dict) -> Iterator[tuple[KeyPath, list[KeyPath], str]]:
    """Every reference to a receiver names one the list defines: a conflict with the list, so a site file that
    replaced it is blamed for the references it left to config/default.yaml."""
    names = _receiver_names(doc)
    if names is None:
        return
    defined = sorted(set(names))
    references: list[tuple[KeyPath, Any]] = [
        (["alertmanager", "default_receiver"], _get(doc, "alertmanager", "default_receiver"))
    ]
    routes = _get(doc, "alertmanager", "routes")
    for index, route in enumerate(routes if isinstance(routes, list) else []):
        if isinstance(route, dict):
            references.append((["alertmanager", "routes", index, "receiver"], route.get("receiver")))
    for path, name in references:
        if isinstance(name, str) and name not in defined:
            guess = difflib.get_close_matches(name, defined, n=1)
            hint = f"did you mean {guess[0]!r}?" if guess else f"define it under alertmanager.receivers ({defined})"
            yield path, [["alertmanager", "receivers"]], f"receiver {name!r} is not defined; {hint}"


_ROUTE_MATCHES = ("match", "match_re", "matchers")
_INTERVAL_REFERENCES = ("mute_time_intervals", "active_time_intervals")


def _routes(doc: dict) -> list[tuple[int, dict]]:
    routes = _get(doc, "alertmanager", "routes")
    return [(index, r) for index, r in enumerate(routes if isinstance(routes, list) else []) if isinstance(r, dict)]


def _routes_match_something(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """A route without matchers would catch every alert and end the list there."""
    for index, route in _routes(doc):
        if not any(key in route for key in _ROUTE_MATCHES):  # an empty one the schema refuses
            yield (
                ["alertmanager", "routes", index],
                "the route matches nothing and would catch every alert; add match: {label: value}, "
                "match_re: {label: regex} or matchers: ['label=~\"regex\"']",
            )


# What Alertmanager's time intervals order (timeinterval: a range whose start is after its end is refused).
_WEEKDAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_ORDERED: dict[str, Callable[[str], int]] = {
    "weekdays": lambda part: _WEEKDAYS.index(part),
    "months": lambda part: int(part) - 1 if part.isdigit() else _MONTHS.index(part),
    "years": int,
}


def _time_interval_ranges(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """Ranges run forwards (the schema has checked each part's spelling): a time of day ends after it starts, a
    `start:end` range of weekdays, months or years starts first. A window over midnight or New Year is two items."""
    intervals = _get(doc, "alertmanager", "time_intervals")
    for name, specs in intervals.items() if isinstance(intervals, dict) else []:
        for index, spec in enumerate(specs if isinstance(specs, list) else []):
            where = ["alertmanager", "time_intervals", name, index]
            for position, times in enumerate(spec.get("times", []) if isinstance(spec, dict) else []):
                start, end = (times.get(k) if isinstance(times, dict) else None for k in ("start_time", "end_time"))
                if isinstance(start, str) and isinstance(end, str) and start >= end:
                    yield (
                        [*where, "times", position],
                        f"start_time {start} is not before end_time {end}; split a window over midnight in two "
                        "(e.g. 22:00-24:00 and 00:00-06:00)",
                    )
            for key, order in _ORDERED.items():
                for position, text in enumerate(spec.get(key, []) if isinstance(spec, dict) else []):
                    try:
                        first, last = (order(part) for part in str(text).split(":"))
                    except ValueError:
                        continue  # one value, or a spelling the schema refuses
                    if first > last:
                        yield (
                            [*where, key, position],
                            f"the range {text!r} runs backwards; write it start:end in order",
                        )


def _time_intervals_referred_to(doc: dict) -> Iterator[tuple[KeyPath, list[KeyPath], str]]:
    """A route mutes or activates itself only by intervals alertmanager.time_intervals defines."""
    defined = _get(doc, "alertmanager", "time_intervals")
    defined = sorted(defined) if isinstance(defined, dict) else []
    for index, route in _routes(doc):
        for key in _INTERVAL_REFERENCES:
            names = route.get(key)
            for position, name in enumerate(names if isinstance(names, list) else []):
                if isinstance(name, str) and name not in defined:
                    guess = difflib.get_close_matches(name, defined, n=1)
                    hint = (
                        f"did you mean {guess[0]!r}?"
                        if guess
                        else f"define it under alertmanager.time_intervals ({', '.join(defined) or 'none defined'})"
                    )
                    yield (
                        ["alertmanager", "routes", index, key, position],
                        [["alertmanager", "time_intervals"]],
                        f"time interval {name!r} is not defined; {hint}",
                    )


def _receiver_names(doc: dict) -> list[str] | None:
    """The receivers' names in order; None when the schema refuses the list (references cannot be judged)."""
    receivers = _get(doc, "alertmanager", "receivers")
    receivers = receivers if isinstance(receivers, list) else []
    names = [r["name"] for r in receivers if isinstance(r, dict) and isinstance(r.get("name"), str)]
    return names if len(names) == len(receivers) else None


def unrouted_teams(doc: dict, teams: Collection[str]) -> list[tuple[KeyPath, str]]:
    """Every team an alert of the build carries (`teams`, known once the content is built without what reads a
    disabled exporter: hpcobs.build.pipeline) has a route matching it on `team`: an alert of a team without one
    falls through to the default receiver, where nobody on that team reads it. A team no alert carries needs no
    route. A route that also matches other labels (severity) counts: the site chose to split the team's alerts.
    Team.NONE is for alerts that only inhibit others; the build routes them itself (INHIBIT_ONLY_RECEIVER). No route
    at all is a choice
    (a small site sending everything to one receiver), not a forgotten team."""
    routes = _get(doc, "alertmanager", "routes")
    if not isinstance(routes, list) or not routes:
        return []
    judged = [_judgeable_route(route) for route in routes]
    if None in judged:
        return []  # the schema refuses the routes; a team's route cannot be told apart from a broken one
    routed = {team for team in Team for on_team in judged if on_team and all(_selects(m, team) for m in on_team)}
    return [
        (
            ["alertmanager", "routes"],
            f"no route for team {team.value!r} (its alerts would reach only the default receiver); add "
            f"{{receiver: ..., match: {{team: {team.value}}}}}",
        )
        for team in Team
        if team is not Team.NONE and team.value in teams and team not in routed
    ]


def _judgeable_route(route: Any) -> list[Matcher] | None:
    """The route's matchers on `team` (none: the route is not a team's); None when the schema refuses the route."""
    if not isinstance(route, dict):
        return None
    try:
        for label, value in route.get("match", {}).items():
            _label_name(label)
            _text(value)
        for label, value in route.get("match_re", {}).items():
            _label_name(label)
            _re2(value)
        for text in route.get("matchers", []):
            _alert_matcher(text)
    except (AttributeError, TypeError, ValueError):
        return None
    return [m for m in route_matchers(route) if m.label == "team"]


def _selects(matcher: Matcher, value: str) -> bool:
    """Whether Alertmanager's matcher selects the label value (its regexes are anchored; RE2 as checked)."""
    if matcher.op in ("=", "!="):
        return (matcher.value == value) == (matcher.op == "=")
    return bool(re.fullmatch(matcher.value, value)) == (matcher.op == "=~")


def _datasources_distinct(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """Grafana finds a datasource by uid and by name: two datasources cannot share either."""
    datasources = _get(doc, "grafana", "datasources")
    for key in ("uid", "name"):
        seen: dict[str, str] = {}
        for kind, settings in datasources.items() if isinstance(datasources, dict) else ():
            value = settings.get(key) if isinstance(settings, dict) else None
            if isinstance(value, str) and value in seen:
                yield (
                    ["grafana", "datasources", kind, key],
                    f"{value!r} is already the {key} of the {seen[value]} datasource; "
                    f"give each datasource its own {key}",
                )
            elif isinstance(value, str):
                seen[value] = kind


def _datasources_provisioned(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """Every dashboard reads Prometheus, so it cannot be left out; Grafana has one default datasource at most."""
    if _get(doc, "grafana", "datasources", "prometheus", "enabled") is False:
        yield (
            ["grafana", "datasources", "prometheus", "enabled"],
            "every dashboard reads the Prometheus datasource, so it cannot be disabled; point its url (and uid) at the "
            "Prometheus that holds the rules' series instead",
        )
    datasources = _get(doc, "grafana", "datasources")
    defaults = [
        kind
        for kind, settings in (datasources.items() if isinstance(datasources, dict) else ())
        if isinstance(settings, dict) and settings.get("enabled") is True and settings.get("is_default") is True
    ]
    for kind in defaults[1:]:
        yield (
            ["grafana", "datasources", kind, "is_default"],
            f"the {defaults[0]} datasource is the default already and Grafana has one default; set is_default: false "
            "on all but one",
        )


def _folder_uid(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """Grafana keeps folders and dashboards under one set of uids: a folder cannot take a dashboard's."""
    uid = _get(doc, "grafana", "folder_uid")
    if isinstance(uid, str) and uid in set(DashboardUid):
        yield (
            ["grafana", "folder_uid"],
            f"{uid!r} is the uid of an hpcobs dashboard, and Grafana gives folders and dashboards distinct uids; "
            "choose another, such as 'hpcobs'",
        )


def _shipped_policy_name(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """The first checkpoint policy is also the name of the TracingPolicy hpcobs ships."""
    policies = _get(doc, "thresholds", "security_checkpoint_policies")
    if isinstance(policies, list) and policies and isinstance(policies[0], str):
        problem = sensor_values.object_name_problem(policies[0])
        if problem:
            yield ["thresholds", "security_checkpoint_policies", 0], problem


# The prolog's job-info series says who owns a job, and the rules attribute GPUs to users and accounts through it, so
# it is trusted only from the root-written textfile directory. Jobs write the series of these roles themselves
# (files in their own metrics directory, their own endpoints): they are told apart by the scrape job, which a file
# cannot set (Prometheus renames a `job` label it writes to exported_job). docs/slurm.md#security.
_JOB_WRITTEN = ("training", "nccl_inspector")
_SECURITY = "see docs/slurm.md#security"


def _enabled_matchers(doc: dict, role: str) -> frozenset[Matcher] | None:
    """The matchers of an enabled role's selector; None when the role is off or the selector is refused (the
    schema's format check reports it)."""
    selector = _get(doc, "exporters", role, "selector")
    if _get(doc, "exporters", role, "enabled") is not True or not isinstance(selector, str):
        return None
    try:
        return frozenset(parse_selector(selector))
    except ValueError:
        return None


def _prolog_job_info(doc: dict) -> frozenset[Matcher] | None:
    return _enabled_matchers(doc, "job_info") if _get(doc, "exporters", "job_info", "source") == "prolog" else None


def _names_its_scrape_job(matchers: frozenset[Matcher]) -> bool:
    return any(m.label == "job" and m.op == "=" for m in matchers)


def _job_info_names_its_scrape_job(doc: dict) -> Iterator[tuple[KeyPath, str]]:
    """Only a selector naming its scrape job keeps out the job-info series a job forges in its own files."""
    job_info = _prolog_job_info(doc)
    if job_info is not None and not _names_its_scrape_job(job_info):
        yield (
            ["exporters", "job_info", "selector"],
            f'{doc["exporters"]["job_info"]["selector"]!r} has no job="..." matcher, so it can select job-info '
            "series that a job forges in its own metric files; select the job of the node_exporter that reads the "
            f'root-only textfile directory (e.g. job="node"), {_SECURITY}',
        )


def _job_info_apart_from_job_written(doc: dict) -> Iterator[tuple[KeyPath, list[KeyPath], str]]:
    """The job-info selector must not be the selector of a role whose series jobs write: matchers compared as
    parsed, so spacing, quotes and order make no difference. A selector without its scrape job has its own line."""
    job_info = _prolog_job_info(doc)
    if job_info is None or not _names_its_scrape_job(job_info):
        return
    same = [role for role in _JOB_WRITTEN if _enabled_matchers(doc, role) == job_info]
    if same:
        named = " and ".join(f"exporters.{role}.selector ({doc['exporters'][role]['selector']!r})" for role in same)
        yield (
            ["exporters", "job_info", "selector"],
            [["exporters", role, "selector"] for role in same],
            f"{doc['exporters']['job_info']['selector']!r} selects the same series as {named}, written by the jobs "
            "themselves, so a job could forge job-info series naming another user or account; select the job of "
            'the node_exporter that reads the root-only textfile directory here (e.g. job="node") and the job of '
            f'the one that reads the jobs\' own directories there (e.g. job="training"), {_SECURITY}',
        )


def _get(doc: Any, *path: str) -> Any:
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc
