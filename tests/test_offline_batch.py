"""Several outputs validated in one batch get their offline checks from one probe of the target
interpreter (vLLM's registry imported and its plugins loaded once), with the rows a probe of
each output alone gives; an output changed since that probe, a probe that crashes and outputs
whose own code runs (--trust-remote-code) are each probed alone.

The interpreter is a shim, as pyenv's are: a shell script that notes its arguments and execs
the real interpreter (this suite's own, whose transformers reads the outputs; or vLLM's)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from engine_support import run_cli, small_llama_output
from test_validate import VLLM_PYTHON, needs_vllm

from mxtrim_tui.core.validate.offline import OfflineBatch
from mxtrim_tui.core.validate.run import offline_checks
from mxtrim_tui.demo.tokenizer import write_tokenizer

pytestmark = pytest.mark.slow  # each probe imports transformers in a child


def shim(folder: Path, real: str, crash_many: bool = False) -> tuple[str, Path]:
    """An interpreter that appends its arguments (one line per run) to ``calls.log`` and runs
    ``real``; ``crash_many``: a batch probe dies at once (status 3)."""
    log = folder / "calls.log"
    script = folder / "python"
    crash = 'case " $* " in *" --many "*) exit 3;; esac\n' if crash_many else ""
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\n{crash}exec "{real}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), log


def probes(log: Path) -> list[list[str]]:
    """The output directories of each probe run the log holds: a batch's, or one alone (the
    runs that read the environment's versions alone left out)."""
    found = []
    for line in log.read_text().splitlines() if log.exists() else []:
        words = line.split()
        if len(words) > 2 and words[1].endswith("offline_probe.py") and words[2] != "--versions":
            found.append(words[5:] if words[2] == "--many" else [words[2]])
    return found


def output(root: Path, name: str, chat_template: bool = True) -> Path:
    out = root / name
    write_tokenizer(out, chat_template=chat_template, generation_config=False)
    (out / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}))
    return out


def table(result) -> list[tuple]:
    env, rows = result
    return [(r.check, r.status, r.detail, r.data) for r in rows]


def test_one_probe_answers_every_output_as_a_probe_of_each_alone(tmp_path):
    python, log = shim(tmp_path, sys.executable)
    outs = [output(tmp_path, "a"), output(tmp_path, "b"), output(tmp_path, "c", chat_template=False)]
    batch = OfflineBatch(python, outs)
    got = {out.name: batch(out, python, False) for out in outs[:2]}
    assert probes(log) == [[str(o) for o in outs]]  # one run, for all three
    env, rows = got["b"]
    assert env["executable"] == sys.executable and env["packages"]["transformers"]["version"]
    alone = offline_checks(outs[1], sys.executable, trust_remote_code=False)
    assert table(got["b"]) == table(alone)
    assert [r.status for r in rows][:3] == ["passed", "passed", "passed"]  # config, tokenizer, chat template

    # c gained a chat template after the batch read it: probed again, alone, and it renders now
    shutil.copy(outs[0] / "chat_template.jinja", outs[2])
    env, rows = batch(outs[2], python, False)
    assert probes(log)[1:] == [[str(outs[2])]]
    assert {r.check: r.status for r in rows}["chat template renders"] == "passed"


def test_outputs_whose_earlier_run_is_reused_are_not_read(tmp_path):
    python, log = shim(tmp_path, sys.executable)
    outs = [output(tmp_path, "a"), output(tmp_path, "b"), output(tmp_path, "c")]
    batch = OfflineBatch(python, outs, will_run=lambda out: out.name != "b")
    batch(outs[0], python, False)
    batch(outs[2], python, False)
    assert probes(log) == [[str(outs[0]), str(outs[2])]]


def test_a_batch_probe_that_crashes_leaves_each_output_to_its_own(tmp_path):
    python, log = shim(tmp_path, sys.executable, crash_many=True)
    outs = [output(tmp_path, "a"), output(tmp_path, "b", chat_template=False)]
    batch = OfflineBatch(python, outs)
    got = [batch(out, python, False) for out in outs]
    assert probes(log) == [[str(o) for o in outs], [str(outs[0])], [str(outs[1])]]
    assert [{r.check: r.status for r in rows}["chat template renders"] for _, rows in got] == ["passed", "not applicable"]
    assert all({r.check: r.status for r in rows}["tokenizer round trip offline"] == "passed" for _, rows in got)


def test_outputs_whose_own_code_may_run_keep_a_probe_each(tmp_path):
    python, log = shim(tmp_path, sys.executable)
    outs = [output(tmp_path, "a"), output(tmp_path, "b")]
    batch = OfflineBatch(python, outs)
    for out in outs:
        batch(out, python, True)
    assert probes(log) == [[str(outs[0])], [str(outs[1])]]


@needs_vllm
def test_validate_of_several_outputs_reads_vllms_registry_once(tmp_path):
    """`mxtrim validate A B` (offline): one probe in vLLM's interpreter; both outputs' records
    name the class vLLM builds, read from the registry the plugins were loaded into once."""
    python, log = shim(tmp_path, VLLM_PYTHON)
    a = small_llama_output(tmp_path / "a", "dummy")
    b = small_llama_output(tmp_path / "b", "weights")
    r = run_cli("validate", str(a), str(b), "--python", python, "--device", "cpu", "--json",
                "--matrix", str(tmp_path), env={"MXTRIM_VLLM_PYTHON": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    assert [row["state"] for row in json.loads(r.stdout)["rows"]] == ["validated", "validated"]
    assert probes(log) == [[str(a), str(b)]]
    registered = []
    for out in (a, b):
        (run,) = json.loads((out / "validation.json").read_text())["runs"]
        (row,) = [row for row in run["rows"] if row["check"] == "architecture registered in this vLLM"]
        assert row["status"] == "passed" and run["environment"]["packages"]["vllm"]["version"] == "0.32.0", row
        registered.append(row["data"]["architectures"])
    assert registered[0] == registered[1] and registered[0][0]["class"] == "LlamaForCausalLM"
    assert os.path.basename(registered[0][0]["file"]) == "llama.py"
