"""Every alert's runbook_url points to an existing section of docs/runbooks."""

import re

import yaml

from tests.conftest import ROOT


def anchors(markdown):
    """GitHub-style anchors of the markdown headings."""
    out = set()
    for heading in re.findall(r"^#+\s+(.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_every_runbook_url_resolves(generated, config):
    base = config.get("runbooks", "base_url")
    checked = 0
    for path, text in generated.items():
        if not path.startswith("prometheus/rules/"):
            continue
        for group in yaml.safe_load(text)["groups"]:
            for rule in group["rules"]:
                if "alert" not in rule:
                    continue
                url = rule["annotations"]["runbook_url"]
                assert url.startswith(base + "/")
                page, anchor = url[len(base) + 1 :].split("#")
                doc = ROOT / "docs" / "runbooks" / page
                assert doc.exists(), f"{rule['alert']}: {doc} missing"
                assert anchor in anchors(doc.read_text()), f"{rule['alert']}: #{anchor} missing in {doc}"
                checked += 1
    assert checked
