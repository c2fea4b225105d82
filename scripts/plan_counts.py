#!/usr/bin/env python3
"""Counts what the engines and verbs know of the policies and allocators (docs/sim.md#the-run-plan).

    scripts/plan_counts.py [ROOT]        prints the counts and each place
    scripts/plan_counts.py --json [ROOT] the counts as JSON (tests/scripts/test_plan.py reads them)

- capability checks: reads of a policy's or an allocator's declarations (policy_iface and alloc_iface
  fields such as never_evicts, needs_attention, kind, scores_from, and the helpers that interpret
  them) in C files outside the layers that own them: policies/, allocators/ and plan/ (the run plan),
  and the layers that define policies (expr/ expressions, python/ and userpol/ plug-ins).
- names: string literals in the engine and verb folders (sim/, capture/, fidelity/, search/,
  analysis/, study/, cli/) that name a registered policy or allocator, alone or in a list
  ("oracle", "keydiff,snapkv", "streaming:sinks=4").
Comments do not count, nor an option table's rows (`--kvzip` is capture's option), nor a prefix
("random:" begins a model), nor the capture modes and attention modes named "full" (ALLOWED).
"""
import json
import os
import re
import sys

OWNERS = ("policies", "allocators", "plan", "expr", "python", "userpol", "include", "tests", "bench", "examples")
ENGINES = ("sim", "capture", "fidelity", "search", "analysis", "study", "cli")
FIELDS = ("never_evicts", "needs_attention", "needs_kvzip", "needs_wo", "needs_wo_for", "without_wo",
          "offline_only", "offline_for", "scores_comparable", "layer_scope", "query_window", "kind",
          "scores_from", "needs_queries", "needs_comparable", "streaming", "per_head", "rank_from_colsum")
# (file, literal): a word that is also a policy's name but names something else there
ALLOWED = {("capture/run.c", "full"), ("capture/verb_capture.c", "full")}  # capture_mode and --attention full
HELPERS = ("policy_reads_wo", "policy_without_wo", "policy_offline_only", "policy_check_online",
           "alloc_streaming_policy", "alloc_default", "ALLOC_STATIC", "ALLOC_DYNAMIC_LAYER", "ALLOC_DYNAMIC_MODEL",
           "ALLOC_SCORES_NONE", "ALLOC_SCORES_FILE", "ALLOC_SCORES_FILE_OR_TRACE")
IFACE_READ = re.compile(r"(?:iface|\bpi|\bai|\bin)\s*->\s*(%s)\b" % "|".join(FIELDS))


def strip_comments(text):
    """The C text with comments blanked (strings kept), line breaks kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text[i] == "'":
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def registry_names(root):
    names = set()
    for folder in ("policies", "allocators"):
        for f in os.listdir(os.path.join(root, folder)):
            if f.endswith(".c"):
                text = open(os.path.join(root, folder, f), encoding="utf-8").read()
                names.update(re.findall(r"^\s*\.name\s*=\s*\"([a-z_0-9]+)\"", text, re.M))
    return names


def c_files(root, folders=None):
    for d, _, files in os.walk(root):
        rel = os.path.relpath(d, root)
        top = rel.split(os.sep, 1)[0]
        if rel == "." or top.startswith("build") or top.startswith("."):
            continue
        if folders is not None and top not in folders:
            continue
        for f in sorted(files):
            if f.endswith((".c", ".h", ".cu")):
                yield os.path.join(rel, f)


def capability_checks(root):
    found = []
    for rel in c_files(root):
        if rel.split(os.sep, 1)[0] in OWNERS:
            continue
        text = strip_comments(open(os.path.join(root, rel), encoding="utf-8").read())
        for no, line in enumerate(text.split("\n"), 1):
            for m in IFACE_READ.finditer(line):
                found.append((rel, no, m.group(1)))
            for h in HELPERS:
                if re.search(r"\b%s\b" % h, line):
                    found.append((rel, no, h))
    return found


def names_in_literals(root, names):
    found = []
    item = re.compile(r"^([a-z_0-9]+)(?::[^,]*)?$")
    for rel in c_files(root, ENGINES):
        text = strip_comments(open(os.path.join(root, rel), encoding="utf-8").read())
        for no, line in enumerate(text.split("\n"), 1):
            if re.search(r"\bROW\(", line):
                continue
            for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', line):
                if lit.endswith(":") or (rel, lit) in ALLOWED:
                    continue
                parts = lit.split(",")
                hits = [item.match(p).group(1) for p in parts if item.match(p) and item.match(p).group(1) in names]
                if hits and (len(parts) == 1 or len(hits) == len(parts)):
                    found.append((rel, no, lit))
    return found


def main(argv):
    as_json = "--json" in argv
    args = [a for a in argv if a != "--json"]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    caps = capability_checks(root)
    names = names_in_literals(root, registry_names(root))
    if as_json:
        print(json.dumps({"capability_checks": len(caps), "names": len(names),
                          "capability_places": ["%s:%d %s" % c for c in caps],
                          "name_places": ["%s:%d %s" % n for n in names]}))
        return 0
    print("capability checks outside policies/, allocators/, plan/ and the policy-defining layers: %d" % len(caps))
    for c in caps:
        print("  %s:%d %s" % c)
    print("policy or allocator names in engine and verb string literals: %d" % len(names))
    for n in names:
        print("  %s:%d \"%s\"" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
