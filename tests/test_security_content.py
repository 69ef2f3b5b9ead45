"""The Falco rules, Tetragon policies and bpftrace tools hpcobs ships (docs/security-content.md): valid for the sensors
that load them, named as the alerts, panels and simulator read them, and safe from the site values they carry."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import promql_parser
import pytest
import yaml
from hpcobs.security import names as security_content

from hpcobs.build import pipeline, validate
from hpcobs.lang import lint, sensor_values
from hpcobs.lang.render import load_yaml
from hpcobs.proof.simulate import Simulation
from hpcobs.settings import config as config_module
from hpcobs.settings.thresholds import Thresholds
from hpcobs.targets import falco as falco_rules
from hpcobs.targets.tetragon import TRACING_POLICY_SCHEMA
from tests.conftest import ROOT

FIELDS = ROOT / "schemas" / "falco" / "fields.txt"
BPFTRACE = ROOT / "tools" / "bpftrace"
# The filter language's words (falcosecurity/libs userspace/libsinsp/filter/parser.cpp: unary, string, list and
# boolean operators); every other unquoted word of a condition is a field, a list or a macro.
OPERATORS = {"and", "or", "not", "exists", "in", "intersects", "pmatch", "glob", "iglob", "regex"}
OPERATORS |= {"contains", "icontains", "bcontains", "startswith", "bstartswith", "endswith"}
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*(?:\[[^\]]*\])?")
_OUTPUT_FIELD = re.compile(r"%([A-Za-z_][A-Za-z0-9_.]*(?:\[[^\]]*\])?)")
# Names Falco's loader accepts without a warning (falcosecurity/falco userspace/engine/rule_loader_reader.cpp,
# RGX_IDENTIFIER and RGX_BARESTR), and the keys it reads for each kind of item.
MACRO_NAME = re.compile(r"[a-zA-Z]+[a-zA-Z0-9_]*")
LIST_NAME = re.compile(r"[^()\"'\s=,]+")
KEYS = {
    "rule": ({"rule", "condition", "output", "desc", "priority"}, {"source", "enabled", "tags", "exceptions"}),
    "macro": ({"macro", "condition"}, set()),
    "list": ({"list", "items"}, set()),
    "required_engine_version": ({"required_engine_version"}, set()),
}


def falco_fields() -> dict[str, set[str]]:
    """Falco's syscall-source fields (schemas/falco/fields.txt), with their EPF_* flags."""
    fields = {}
    for line in FIELDS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, flags, _ = line.split()
            fields[name] = set() if flags == "-" else set(flags.split("|"))
    return fields


def field_problem(token: str, fields: dict[str, set[str]], where: str) -> str | None:
    """Why Falco would refuse this field reference in a condition or an output, or None: `name`, `name[arg]`,
    or `name.arg` for the fields taking an argument that way (evt.arg.flags, thread.cgroup.cpu)."""
    name, bracket, _ = token.partition("[")
    flags = fields.get(name)
    if flags is None and not bracket:
        parent = next((f for f in fields if name.startswith(f + ".") and "ARG_REQUIRED" in fields[f]), None)
        flags = None if parent is None else fields[parent] - {"ARG_REQUIRED"}
    if flags is None:
        return f"{token}: not a field of Falco's syscall source"
    if bracket and not flags & {"ARG_ALLOWED", "ARG_REQUIRED"}:
        return f"{token}: {name} takes no argument"
    if not bracket and "ARG_REQUIRED" in flags:
        return f"{token}: {name} needs an argument"
    if where == "condition" and flags & {"PRINT_ONLY", "TABLE_ONLY"}:
        return f"{token}: {name} cannot be filtered on"
    if where == "output" and "FILTER_ONLY" in flags:
        return f"{token}: {name} cannot be printed"
    return None


def condition_problems(condition: str, defined: set[str], fields: dict[str, set[str]]) -> list[str]:
    """Every unquoted word: a field of Falco's list, an operator, or a list or macro defined before it."""
    problems = []
    for word in _WORD.findall(_QUOTED.sub(" ", condition)):
        if "." in word.partition("[")[0]:
            problems.append(field_problem(word, fields, "condition"))
        elif word not in OPERATORS and word not in defined:
            problems.append(f"{word}: neither an operator nor a list or macro defined before it")
    return [problem for problem in problems if problem]


@pytest.fixture(scope="module")
def rules_file(generated) -> list[dict]:
    return load_yaml(generated[falco_rules.PATH])


@pytest.fixture(scope="module")
def policies(generated) -> dict[str, dict]:
    return {path: load_yaml(text) for path, text in generated.items() if path.startswith("tetragon/")}


def load_site(tmp_path: Path, site: dict) -> config_module.Config:
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site), encoding="utf-8")
    return config_module.load(path)


# --- Falco ---------------------------------------------------------------------------------------------------


def test_the_rules_file_is_valid_for_falcos_own_schema(generated):
    assert validate.schema_for(falco_rules.PATH) == "falco/rule_schema.json"
    assert validate.schema_errors(falco_rules.PATH, generated[falco_rules.PATH]) == []
    misspelt = load_yaml(generated[falco_rules.PATH]) + [{"rule": "x", "priorty": "INFO"}]
    assert validate.schema_errors(falco_rules.PATH, yaml.safe_dump(misspelt)), "the schema must refuse unknown keys"


def test_each_item_has_the_keys_falcos_loader_requires_and_names_it_accepts(rules_file):
    for item in rules_file:
        kind = next(key for key in KEYS if key in item)
        required, optional = KEYS[kind]
        assert required <= set(item) <= required | optional, item
    assert all(MACRO_NAME.fullmatch(item["macro"]) for item in rules_file if "macro" in item)
    assert all(LIST_NAME.fullmatch(item["list"]) for item in rules_file if "list" in item)
    names = [item.get("rule") or item.get("macro") or item.get("list") for item in rules_file]
    assert len(names) == len(set(names)), "a name defined twice replaces the first definition"


def test_every_condition_word_is_a_known_field_an_operator_or_a_definition_before_it(rules_file):
    fields = falco_fields()
    defined: set[str] = set()
    problems = []
    for item in rules_file:
        if "condition" in item:
            problems += condition_problems(item["condition"], defined, fields)
        defined.add(item.get("macro") or item.get("list") or "")
    assert problems == []


def test_every_output_field_is_a_printable_falco_field(rules_file):
    fields = falco_fields()
    outputs = [item["output"] for item in rules_file if "rule" in item]
    problems = [field_problem(field, fields, "output") for output in outputs for field in _OUTPUT_FIELD.findall(output)]
    assert [problem for problem in problems if problem] == []
    assert all("%thread.cgroups" in output for output in outputs), "every match must name the job's cgroup"


def test_the_field_check_catches_what_falco_refuses():
    fields = falco_fields()
    assert field_problem("proc.nmae", fields, "condition")
    assert field_problem("fd.snet", fields, "output")  # filter-only
    assert field_problem("proc.name[1]", fields, "condition")
    assert field_problem("thread.cgroup", fields, "condition")  # needs the subsystem
    assert field_problem("proc.aexepath[2]", fields, "condition") is None
    assert field_problem("evt.arg.flags", fields, "output") is None
    assert condition_problems('proc.name = "x" and undefined_macro', set(), fields) == [
        "undefined_macro: neither an operator nor a list or macro defined before it"
    ]


def test_the_field_list_names_its_source_and_covers_the_fields_the_rules_rely_on():
    header = FIELDS.read_text(encoding="utf-8").splitlines()[0]
    assert re.search(r"falcosecurity/libs 0\.21\.0, commit [0-9a-f]{40}", header)
    assert {"thread.cgroups", "proc.aexepath", "fd.snet", "fd.name", "fs.path.name"} <= set(falco_fields())


def test_job_processes_are_never_selected_by_name(rules_file):
    job = next(item["condition"] for item in rules_file if item.get("macro") == "hpcobs_job_process")
    assert "thread.cgroups" in job and "proc.aexepath" in job
    assert not re.search(r"\bproc\.(a|p)?name\b|\bthread\.comm\b", job)


# --- Tetragon ------------------------------------------------------------------------------------------------


def test_policies_are_valid_for_the_tracingpolicy_crd(config, generated, policies):
    assert len(policies) == len(security_content.tetragon_policies(Thresholds.from_config(config["thresholds"])))
    for path in policies:
        assert validate.schema_for(path) == TRACING_POLICY_SCHEMA
        assert validate.schema_errors(path, generated[path]) == []
    path = "tetragon/hpcobs-checkpoint-guard.yaml"
    document = load_yaml(generated[path])
    document["spec"]["kprobes"][0]["selectors"][0]["matchArgz"] = []
    assert validate.schema_errors(path, yaml.safe_dump(document)), "the closed schema must refuse unknown fields"
    document = load_yaml(generated[path])
    document["metadata"]["name"] = "guard|audit"
    assert validate.schema_errors(path, yaml.safe_dump(document)), "the API server refuses such a name"


def test_monitor_mode_reports_only_and_enforce_mode_denies_or_kills(tmp_path, config, policies):
    def actions(document: dict) -> list[str]:
        return [
            action["action"]
            for probe in document["spec"]["kprobes"]
            for selector in probe["selectors"]
            for action in selector.get("matchActions", [])
        ]

    assert {action for document in policies.values() for action in actions(document)} <= {"NoPost"}
    enforcing = pipeline.generate(load_site(tmp_path, {"security": {"tetragon_enforce": True}}))
    thresholds = Thresholds.from_config(config["thresholds"])
    for policy in security_content.tetragon_policies(thresholds):
        path = f"tetragon/hpcobs-{policy.key}.yaml"
        assert validate.schema_errors(path, enforcing[path]) == []
        document = load_yaml(enforcing[path])
        reporting = document["spec"]["kprobes"][0]["selectors"][-1]
        assert [action["action"] for action in reporting["matchActions"]] == [policy.enforcement]
        if policy.enforcement == "Override":
            assert reporting["matchActions"][0]["argError"] == -1  # EPERM
        assert document["spec"]["kprobes"][0]["call"] == policy.function


def test_guards_drop_job_processes_and_allowed_programs_before_reporting(policies):
    guard = policies["tetragon/hpcobs-checkpoint-guard.yaml"]["spec"]["kprobes"][0]
    first, last = guard["selectors"][0], guard["selectors"][-1]
    assert first["matchActions"] == [{"action": "NoPost"}]
    assert first["matchBinaries"] == [{"operator": "In", "values": ["/usr/sbin/slurmstepd"], "followChildren": True}]
    assert last["matchArgs"] == [{"index": 0, "operator": "Prefix", "values": ["/checkpoints/"]}]
    ioctl = policies["tetragon/hpcobs-gpu-device-ioctl.yaml"]["spec"]["kprobes"][0]
    assert len(ioctl["selectors"]) == 3, "job processes, then the monitoring agents, then the report"


# --- names: what the alerts and panels read is what ships ------------------------------------------------------


def _literal_names(regex: str) -> set[str]:
    """The names of an RE2 alternation of literals (hpcobs.lang.escape.regex_alternation's output)."""
    names = re.split(r"(?<!\\)\|", regex)
    assert all(not re.search(r"(?<!\\)[.^$*+?()\[\]{}]", name) for name in names), f"not a list of names: {regex}"
    return {re.sub(r"\\(.)", r"\1", name) for name in names}


def selected(generated: dict[str, str]) -> dict[str, set[str]]:
    """Label values of rule_name, policy and priority that the alerts and the panels select by = or =~."""
    expressions = [
        rule["expr"]
        for path, text in generated.items()
        if path.startswith("prometheus/rules/")
        for group in load_yaml(text)["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]

    def exprs(node) -> list[str]:
        if isinstance(node, dict):
            return [v for k, v in node.items() if k == "expr" and isinstance(v, str)] + exprs(list(node.values()))
        return [e for item in node for e in exprs(item)] if isinstance(node, list) else []

    for path, text in generated.items():
        if path.startswith("grafana/dashboards/"):
            expressions += exprs(json.loads(text))
    found: dict[str, set[str]] = {"rule_name": set(), "policy": set(), "priority": set()}

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            for matcher in node.matchers.matchers:
                if matcher.name in found and matcher.op == promql_parser.MatchOp.Equal:
                    found[matcher.name].add(matcher.value)
                elif matcher.name in found and matcher.op == promql_parser.MatchOp.Re:
                    found[matcher.name] |= _literal_names(matcher.value)

    for expr in expressions:
        promql = lint.promql_text(expr)
        if promql is not None and re.search(r"rule_name|policy|priority", promql):
            promql_parser.walk(promql_parser.parse(promql), visit)
    return found


def test_every_name_the_alerts_and_panels_select_is_shipped(config, generated, rules_file, policies):
    read = selected(generated)
    shipped_rules = {item["rule"] for item in rules_file if "rule" in item}
    shipped_policies = {document["metadata"]["name"] for document in policies.values()}
    assert read["rule_name"] and read["rule_name"] <= shipped_rules
    assert read["policy"] and read["policy"] <= shipped_policies


def test_every_shipped_rule_and_policy_is_selected_or_says_why_not(config, generated, rules_file, policies):
    read = selected(generated)
    thresholds = Thresholds.from_config(config["thresholds"])
    for rule in security_content.falco_rules(thresholds):
        is_read = rule.name in read["rule_name"] or rule.priority_number in read["priority"]
        assert is_read == (rule.unselected_reason is None), rule
    for policy in security_content.tetragon_policies(thresholds):
        assert (policy.name in read["policy"]) == (policy.unselected_reason is None), policy
    shipped = [(item["rule"], item["priority"], item["tags"]) for item in rules_file if "rule" in item]
    assert shipped == [(r.name, r.priority, list(r.tags)) for r in security_content.falco_rules(thresholds)]
    assert sorted(document["metadata"]["name"] for document in policies.values()) == sorted(
        policy.name for policy in security_content.tetragon_policies(thresholds)
    )


def test_a_renamed_rule_is_renamed_where_it_ships_and_where_it_is_read(tmp_path):
    site = {"thresholds": {"security_outbound_rules": ["Egress from a job"]}}
    files = pipeline.generate(load_site(tmp_path, site))
    assert "rule: Egress from a job" in files[falco_rules.PATH]
    assert "Unexpected outbound connection destination" not in files[falco_rules.PATH]
    assert selected(files)["rule_name"] >= {"Egress from a job"}


def test_the_simulators_security_scenarios_emit_the_shipped_names(config):
    thresholds = Thresholds.from_config(config["thresholds"])
    rules = {rule.name: rule for rule in security_content.falco_rules(thresholds)}
    policies = {policy.name: policy for policy in security_content.tetragon_policies(thresholds)}
    sim = Simulation(
        config,
        nodes=10,
        gpus_per_node=2,
        hours=0.5,
        seed=1,
        scenarios="unexpected_outbound,checkpoint_foreign_read,crypto_miner",
    )
    names = {
        "falcosecurity_falco_rules_matches_total",
        "tetragon_policy_events_total",
        "tetragon_tracingpolicy_selector_actions_total",
    }
    emitted_rules, emitted_policies = set(), set()
    for family in sim.families(names):
        for labels, values in family.series:
            if all(value is None for value in values):
                continue
            if "rule_name" in labels:
                rule = rules[labels["rule_name"]]
                tags = tuple(label.removeprefix("tag_") for label in labels if label.startswith("tag_"))
                assert (labels["priority"], set(tags)) == (rule.priority_number, set(rule.tags)), labels
                emitted_rules.add(rule.key)
            else:
                assert labels["hook"] == policies[labels["policy"]].hook, labels
                emitted_policies.add(policies[labels["policy"]].key)
    assert emitted_rules == {"outbound", "checkpoint", "miner"}
    assert emitted_policies == {"checkpoint-guard", "block-miners"}


# --- site values -----------------------------------------------------------------------------------------------


def test_site_values_land_quoted_in_falco_and_as_values_in_tetragon(tmp_path):
    site = {
        "security": {
            "checkpoint_dirs": ["/lustre/ckpt", "/scratch/run+1"],
            "allowed_destinations": ["10.20.0.0/16", "2001:0db8:0000::/32"],
        }
    }
    files = pipeline.generate(load_site(tmp_path, site))
    falco = files[falco_rules.PATH]
    assert "- '\"/lustre/ckpt\"'" in falco and "- '\"2001:db8::/32\"'" in falco  # IPv6 in its canonical spelling
    guard = load_yaml(files["tetragon/hpcobs-checkpoint-guard.yaml"])
    assert guard["spec"]["kprobes"][0]["selectors"][-1]["matchArgs"][0]["values"] == [
        "/lustre/ckpt/",
        "/scratch/run+1/",
    ]
    assert "2001:db8::/32" in files["tetragon/hpcobs-outbound-connect.yaml"]


@pytest.mark.parametrize(
    "value",
    ['/usr/bin" or proc.name exists or "', "/a b", "/x\n", "/ckpt/*", "(", "/a,b", "/a\\b", "/a'b"],
)
def test_the_insertion_helper_refuses_what_a_sensor_would_not_read_literally(value):
    with pytest.raises(ValueError):
        sensor_values.literal(value)
    assert sensor_values.path_problem(value)


def test_values_that_bypass_the_config_check_are_refused_at_insertion(config):
    data = json.loads(json.dumps(config.data))
    data["security"]["checkpoint_dirs"] = ['/c" or evt.num >= 0 or fd.name = "']
    with pytest.raises(ValueError, match="would not read literally"):
        pipeline.generate(config_module.Config(data=data, origin=config.origin))


# --- bpftrace --------------------------------------------------------------------------------------------------

# bpftrace prints this about the locked-memory limit on every run, also in dry-run, where it does not matter.
_HARMLESS = re.compile(r"couldn't set RLIMIT_MEMLOCK|Error while reading traceable functions")
# tracefs is not mounted in every container: bpftrace then cannot read tracepoint formats. Mounting it in a
# private mount namespace (unshare, as root) leaves the host's mounts as they are.
_WITH_TRACEFS = 'mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; exec bpftrace -d "$@"'


def dry_run(script: Path, *arguments: str) -> tuple[int, list[str]]:
    """bpftrace's dry run (-d): parse, then check every probe, type and field against the running kernel's BTF,
    without loading anything; (exit status, error lines)."""
    command = ["bpftrace", "-d", str(script), *arguments]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if "tracepoint not found" in done.stderr and shutil.which("unshare"):
        private = ["unshare", "--mount", "sh", "-c", _WITH_TRACEFS, "sh", str(script), *arguments]
        done = subprocess.run(private, capture_output=True, text=True, timeout=120)
    lines = [
        line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line and not _HARMLESS.search(line)
    ]
    return done.returncode, lines


@pytest.fixture(scope="module")
def bpftrace_available():
    if shutil.which("bpftrace") is None:
        pytest.skip("bpftrace is not installed (Debian: apt-get install bpftrace)")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        pytest.skip("the kernel exposes no BTF (/sys/kernel/btf/vmlinux): bpftrace cannot type the probes")


def test_cuda_alloc_dry_runs_against_a_library_exporting_cumemalloc(bpftrace_available, tmp_path):
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler to build a library exporting cuMemAlloc_v2 (no GPU driver here)")
    source = tmp_path / "stub.c"
    source.write_text("int cuMemAlloc_v2(void **ptr, unsigned long size) { return ptr == 0 && size == 0; }\n")
    library = tmp_path / "libcuda.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=60)
    assert dry_run(BPFTRACE / "cuda_alloc.bt", str(library), "0") == (0, [])


def test_tcp_connect_dry_runs(bpftrace_available):
    assert dry_run(BPFTRACE / "tcp_connect.bt", "4242", "0") == (0, [])


def test_checkpoint_open_dry_runs(bpftrace_available):
    status, errors = dry_run(BPFTRACE / "checkpoint_open.bt", "/checkpoints/", "13")
    if any("available_filter_functions" in error for error in errors):
        pytest.skip(
            "bpftrace 0.17 resolves kfunc probes through /sys/kernel/tracing/available_filter_functions, which this "
            f"machine does not let it read (even with tracefs mounted): {errors[0]}"
        )
    assert (status, errors) == (0, [])


def test_config_schema_and_formats_cover_every_security_key(config):
    schema = json.loads((ROOT / "config" / "schema.json").read_text(encoding="utf-8"))["properties"]["security"]
    assert set(schema["required"]) == set(config["security"]) == set(schema["properties"])
    jsonschema.Draft7Validator.check_schema(schema)
