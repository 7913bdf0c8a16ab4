"""Fast checks of the stage runner's plan and errors, the synthetic sample and the docker files."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from pipelines import synthetic
from pipelines.run.config import effective_config
from pipelines.run.declare import Context
from pipelines.run.plan import make_plan
from pipelines.run.stages import BY_NAME, NAMES, STAGES
from tests.support.paths import REPO as ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def cli(forked_commands) -> Callable[..., subprocess.CompletedProcess]:
    """``python -m pipelines.run *args``, forked from a server that imported the runner once
    (tests/support/cli_process.py ForkedCommands): a fork, not 2-7 s of interpreter start, per
    command.
    test_a_stage_dies_with_a_runner_killed_outright starts a plain ``python -m`` one."""
    return functools.partial(forked_commands.run, "pipelines.run")


def test_dry_run_plans_every_stage_and_writes_nothing(cli, tmp_path: Path):
    out = tmp_path / "run"
    p = cli("--config", "configs/demo.yaml", "--output", str(out), "--dry-run")
    assert p.returncode == 0, p.stderr
    plan = [line.split(None, 2) for line in p.stdout.splitlines()]
    assert [row[0] for row in plan] == NAMES
    # every stage is in the checkout; the demo labels its sample from the planted alignment
    assert {a for name, a, _ in plan if name != "labels"} == {"run"}, p.stdout
    assert [a for name, a, _ in plan if name == "labels"] == ["off"]
    assert not out.exists()


@pytest.mark.slow
def test_data_folders_that_cannot_work_are_refused_up_front(cli, tmp_path: Path):
    data = tmp_path / "data"
    (data / "tatoeba").mkdir(parents=True)  # empty
    (data / "wikipedia").mkdir()
    (data / "commoncrawl").mkdir()
    for extra in ([], ["--dry-run"]):
        p = cli("--output", str(tmp_path / "run"), "--data", str(data), *extra)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert (
            "--data" in p.stderr
            and str(data / "tatoeba") in p.stderr
            and "Traceback" not in p.stderr
        )
        assert not (tmp_path / "run").exists()
    synthetic.generate(data, seed=0, n_train=20, n_dev=10)  # now complete: the plan goes through
    p = cli("--output", str(tmp_path / "run"), "--data", str(data), "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "synthetic      off" in p.stdout
    (data / "tatoeba" / "dev.fra-eng.fra").write_bytes(b"")
    p = cli("--output", str(tmp_path / "run"), "--data", str(data), "--dry-run")
    assert p.returncode == 2 and "dev.fra-eng.fra" in p.stderr, p.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "mining.k=0"], "mining.k"),
        (["--set", "run.no_such_key=1"], "run.no_such_key"),
        (["--data", "/nonexistent/data"], "--data"),
        (["--config", "/nonexistent.yaml"], "config file not found"),
        (["--from", "mine", "--only", "mine"], "exclude"),
        (["--set", "sources.demo.langs=[xyz]"], "sources.demo.langs"),
        (["--set", "sources.demo.langs=[ita]"], "synthetic sample"),
        (["--set", "mining.pairs=[de-xx]"], "mining.pairs"),
        (["--set", "mining.pairs=[de-en]"], "not mined"),
        (["--set", "mining.pairs=[]"], "mining.pairs is empty"),
        (["--set", "model.init=/nonexistent/labse"], "model.init"),
        (
            ["--set", "sources.demo=null"],
            "matches no file",
        ),  # the demo globs, from the current folder
        (["--set", "nosection.key=1"], "nosection"),
    ],
)
def test_bad_arguments_are_one_line_errors(cli, tmp_path: Path, args, message):
    p = cli("--output", str(tmp_path / "run"), "--dry-run", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert message in p.stderr and "Traceback" not in p.stderr


def test_from_needs_complete_upstream(cli, tmp_path: Path):
    p = cli("--output", str(tmp_path / "run"), "--from", "mine")
    assert p.returncode == 2 and "not complete" in p.stderr


def test_stage_declarations_are_consistent(tmp_path: Path):
    names = [s.name for s in STAGES]
    assert len(set(names)) == len(names)
    ctx = Context(
        out=tmp_path,
        base=tmp_path / "synthetic",
        synthetic=True,
        config_file=tmp_path / "_config.yaml",
        cfg=effective_config("demo", []),
    )
    make_plan(ctx)
    for i, s in enumerate(STAGES):
        for dep in s.deps(ctx):  # upstream stages are declared before the stages that read them
            assert names.index(dep) < i, (s.name, dep)
        assert s.commands(ctx) and s.outputs(ctx), s.name
        # The declared name is the Stage, in the module that declares it.
        declaring = sys.modules[s.commands.__module__]
        assert BY_NAME[s.name] is s and getattr(declaring, s.name.upper()) is s


def test_synthetic_sample_is_deterministic_and_real_language(tmp_path: Path):
    from filters.langid import LanguageIdentifier

    a, b = tmp_path / "a", tmp_path / "b"
    synthetic.generate(a, seed=0, n_train=50, n_dev=20)
    synthetic.generate(b, seed=0, n_train=50, n_dev=20)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    for kind, names in synthetic.data_files().items():
        assert all((a / n).is_file() for n in names), kind
    lid = LanguageIdentifier()
    for code, lang in (("deu", "de"), ("fra", "fr"), ("spa", "es"), ("eng", "en")):
        src = "deu" if code == "eng" else code
        lines = (a / "tatoeba" / f"train.{src}-eng.{code}").read_text(encoding="utf-8").splitlines()
        assert len(lines) == 50
        hits = sum(r.lang == lang for r in lid.predict(lines))
        assert hits >= 0.9 * len(lines), (code, hits)
    # Dev pairs of different languages share no sentence, train and dev are disjoint.
    de = set((a / "tatoeba" / "dev.deu-eng.eng").read_text().splitlines())
    fr = set((a / "tatoeba" / "dev.fra-eng.eng").read_text().splitlines())
    tr = set((a / "tatoeba" / "train.deu-eng.eng").read_text().splitlines())
    assert not de & fr and not de & tr


# --- docker ------------------------------------------------------------------------------------

DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_dockerfiles_parse_and_copy_existing_sources():
    assert {p.name for p in DOCKERFILES} >= {"beam-worker.Dockerfile", "train.Dockerfile"}
    for path in DOCKERFILES:
        ins = _instructions(path)
        ops = {op for op, _ in ins}
        assert ops <= {
            "ARG",
            "FROM",
            "WORKDIR",
            "COPY",
            "RUN",
            "ENV",
            "ENTRYPOINT",
            "CMD",
            "LABEL",
        }, ops
        assert any(op == "FROM" for op, _ in ins)
        args = {
            rest.split("=")[0]: rest.split("=", 1)[1]
            for op, rest in ins
            if op == "ARG" and "=" in rest
        }
        for op, rest in ins:
            if op == "FROM":
                image = re.sub(r"\$\{(\w+)\}", lambda m, a=args: a[m.group(1)], rest.split()[0])
                assert ":" in image and not image.endswith(":latest"), (path.name, image)
            if op == "COPY" and "--from" not in rest:
                *sources, _dest = rest.split()
                for src in sources:  # relative to the build context: the repository root
                    assert (ROOT / src).exists(), (path.name, src)
            if op == "RUN" and "pip install" in rest:
                assert "torch==" in rest.replace('"', "").replace(
                    "${TORCH_VERSION}", args.get("TORCH_VERSION", "")
                ), path


def test_beam_worker_image_matches_the_launcher_beam_version():
    import apache_beam

    args = dict(
        r.split("=", 1)
        for op, r in _instructions(ROOT / "docker" / "beam-worker.Dockerfile")
        if op == "ARG" and "=" in r
    )
    assert args["BEAM_VERSION"] == apache_beam.__version__
    compose = yaml.safe_load((ROOT / "docker" / "flink-compose.yaml").read_text())
    images = {name: svc.get("image", "") for name, svc in compose["services"].items()}
    assert images["job-server"].endswith(f":{apache_beam.__version__}")
    assert images["beam-worker-pool"].endswith(f":{apache_beam.__version__}")


def test_flink_compose_services_are_pinned_and_buildable():
    compose = yaml.safe_load((ROOT / "docker" / "flink-compose.yaml").read_text())
    services = compose["services"]
    assert {"jobmanager", "taskmanager", "job-server", "beam-worker-pool"} <= set(services)
    for name, svc in services.items():
        assert ":" in svc["image"] and not svc["image"].endswith(":latest"), name
        build = svc.get("build")
        if build:
            ctx = (ROOT / "docker" / build["context"]).resolve()
            assert (ctx / build["dockerfile"]).is_file(), name
    jm = services["jobmanager"]["environment"]["FLINK_PROPERTIES"]
    assert "jobmanager.rpc.address: jobmanager" in jm


def test_bitext_from_filter_outputs_names_each_drop_reason(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from filters.bitext.export import export_bitext

    def bitext(mined, filtered, min_margin, out, rules=None):
        return export_bitext(mined, out, filtered=filtered, rules=rules, min_margin=min_margin)

    rows = [
        {"src": f"s{i}", "trg": f"t{i}", "src_lang": "de", "trg_lang": "en", "margin": 1.0 + i / 10}
        for i in range(6)
    ]
    (tmp_path / "mine" / "de-en").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mine" / "de-en" / "mined.parquet")
    (tmp_path / "rules" / "de-en").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist([{**rows[0], "step": "length", "reason": "too_short"}]),
        tmp_path / "rules" / "de-en" / "dropped.parquet",
    )
    (tmp_path / "apply").mkdir()
    pq.write_table(
        pa.Table.from_pylist([{**r, "cds_score": 0.5} for r in rows[2:]]),
        tmp_path / "apply" / "kept.parquet",
    )
    pq.write_table(
        pa.Table.from_pylist([{**rows[1], "cds_score": -2.0, "reason": "below_threshold"}]),
        tmp_path / "apply" / "rejected.parquet",
    )
    rep = bitext(tmp_path / "mine", tmp_path / "apply", 1.05, tmp_path / "out", tmp_path / "rules")
    c = rep["counts"]["pairs"]
    assert (c["in"], c["out"]) == (6, 4)
    assert c["dropped"] == {"rules:too_short": 1, "cds:below_threshold": 1}
    kept = pq.read_table(tmp_path / "out" / "bitext.parquet").to_pylist()
    assert [r["src"] for r in kept] == ["s2", "s3", "s4", "s5"] and kept[0]["cds_score"] == 0.5
    assert (tmp_path / "out" / "bitext.de-en.de").read_text().splitlines() == [
        "s2",
        "s3",
        "s4",
        "s5",
    ]
    # Rules only: what they kept, above the margin floor.
    pq.write_table(pa.Table.from_pylist(rows[1:]), tmp_path / "rules" / "de-en" / "kept.parquet")
    rep = bitext(tmp_path / "mine", None, 1.25, tmp_path / "out1", tmp_path / "rules")
    assert rep["counts"]["pairs"]["dropped"] == {"rules:too_short": 1, "below_min_margin": 2}
    # Without the filter stages: the mined pairs above the margin floor.
    rep = bitext(tmp_path / "mine", None, 1.25, tmp_path / "out2")
    assert rep["counts"]["pairs"]["dropped"] == {"below_min_margin": 3}


def test_a_refused_optional_stage_makes_the_rest_fall_back(tmp_path: Path):
    ctx = Context(
        out=tmp_path,
        base=tmp_path / "synthetic",
        synthetic=True,
        config_file=tmp_path / "_config.yaml",
        cfg=effective_config("demo", []),
    )
    plans = {p.stage.name: p for p in make_plan(ctx)}
    bitext_cmd = BY_NAME["bitext"].commands(ctx)[0]
    assert "--combined" in bitext_cmd
    assert BY_NAME["cds_train"].optional and not BY_NAME["train"].optional
    # The final filter is not optional: an unreachable target is the ending combine.on_unreachable names.
    assert not BY_NAME["sample"].optional and not BY_NAME["combine"].optional
    sample_cmd = BY_NAME["sample"].commands(ctx)[0]
    assert str(tmp_path / "cds_score" / "scored.parquet") in sample_cmd
    # The miner re-ranks with the lexicon stage's dictionaries.
    assert str(tmp_path / "lexicon" / "lexicon.parquet") in BY_NAME["mine"].commands(ctx)[0]
    ctx.soft_failed["cds_train"] = "error: fewer than cds.min_trusted usable trusted pairs"
    ctx.soft_failed["lexicon"] = "error: no pair with a token on both sides"
    plans = {p.stage.name: p for p in make_plan(ctx)}
    assert plans["cds_train"].action == "off" and "min_trusted" in plans["cds_train"].reason
    assert plans["cds_score"].action == "off" and "cds_train" in plans["cds_score"].reason
    assert plans["lexicon"].action == "off" and plans["mine"].action == "run"
    assert plans["sample"].action == plans["combine"].action == plans["bitext"].action == "run"
    # Without the lexicon the miner ranks by margin alone; without CDS the sample and the
    # combined score use the pairs the rules kept.
    assert "--lexicon" not in BY_NAME["mine"].commands(ctx)[0]
    sample_cmd = BY_NAME["sample"].commands(ctx)[0]
    assert str(tmp_path / "rules" / "kept_all.parquet") in sample_cmd
    bitext_cmd = BY_NAME["bitext"].commands(ctx)[0]
    assert "--combined" in bitext_cmd and "--rules" in bitext_cmd


@pytest.mark.slow
def test_bitext_export_command_claims_its_output_and_names_bad_inputs(
    forked_commands, tmp_path: Path
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    def export(*args: str) -> subprocess.CompletedProcess:
        # forked from a server that imported the command once (tests/support/cli_process.py)
        return forked_commands.run("filters", "export", *args)

    p = export("--mined", str(tmp_path / "none"), "--output", str(tmp_path / "out"))
    assert p.returncode == 2 and "--mined" in p.stderr and "Traceback" not in p.stderr
    (tmp_path / "mine" / "de-en").mkdir(parents=True)
    mined = tmp_path / "mine" / "de-en" / "mined.parquet"
    mined.write_bytes(b"PAR1 not really")
    p = export("--mined", str(tmp_path / "mine"), "--output", str(tmp_path / "out"))
    assert p.returncode == 2 and str(mined) in p.stderr and "Traceback" not in p.stderr
    rows = [
        {"src": f"s{i}", "trg": f"t{i}", "src_lang": "de", "trg_lang": "en", "margin": 1.0 + i / 10}
        for i in range(4)
    ]
    pq.write_table(pa.Table.from_pylist(rows), mined)
    p = export(
        "--mined", str(tmp_path / "mine"), "--min-margin", "1.15", "--output", str(tmp_path / "out")
    )
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path / "out")) == [
        "bitext.de-en.de",
        "bitext.de-en.en",
        "bitext.parquet",
        "bitext.tsv.gz",
        "hf",
        "rejected.parquet",
        "stats.json",
    ]
    p = export("--mined", str(tmp_path / "mine"), "--output", str(tmp_path / "out"))
    assert p.returncode == 2 and "--overwrite" in p.stderr


def test_a_second_runner_on_the_same_output_stops_naming_the_claim(cli, tmp_path: Path):
    from labse_common.output_dir import claim_output

    out = tmp_path / "run"
    with claim_output(out, resumable=True):
        p = cli("--output", str(out))
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert "_CLAIM.json" in p.stderr and "Traceback" not in p.stderr
        assert (out / "_CLAIM.json").is_file()  # still the first runner's
        assert cli("--output", str(out), "--dry-run").returncode == 0  # reading the plan is fine
    assert not (out / "_CLAIM.json").exists()


def test_the_claim_of_a_killed_runner_is_taken_over_and_released_on_failure(cli, tmp_path: Path):
    import json
    import socket

    out = tmp_path / "run"
    out.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (out / "_CLAIM.json").write_text(
        json.dumps(
            {"job_id": "killed", "host": socket.gethostname(), "pid": gone.pid, "started": "-"}
        )
    )
    p = cli("--output", str(out), "--only", "report")  # fails fast: its inputs are not complete
    assert p.returncode == 2 and "not complete" in p.stderr, p.stderr
    assert "taking over" in p.stderr
    assert not (out / "_CLAIM.json").exists()


def test_a_command_is_the_same_before_and_after_its_upstream_stage_wrote(tmp_path: Path):
    """The cache key is made when the plan is made, before upstream stages have written: a
    command that globbed an upstream output would differ when it runs, and every later run would
    call it changed."""
    for data in (None, synthetic_data(tmp_path)):
        out = tmp_path / ("run-data" if data else "run-synth")
        ctx = Context(
            out=out,
            base=data or out / "synthetic",
            synthetic=data is None,
            config_file=out / "_config.yaml",
            cfg=effective_config("demo", []),
        )
        make_plan(ctx)
        before = {s.name: s.commands(ctx) for s in STAGES if ctx.on[s.name]}
        web = out / "demo" / "web" / "planted.warc.wet.gz"
        web.parent.mkdir(parents=True)
        web.write_bytes(b"")
        after = {s.name: s.commands(ctx) for s in STAGES if ctx.on[s.name]}
        assert before == after
        assert any(str(web) in c for c in before["commoncrawl"][0])


def synthetic_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    synthetic.generate(data, seed=0, n_train=20, n_dev=10)
    return data


@pytest.mark.slow
def test_a_stage_dies_with_a_runner_killed_outright(cli, tmp_path: Path):
    """kill -9 of the runner mid-stage: the stage's process goes too (parent-death signal), and
    the next run takes the claim and resumes."""
    import os
    import signal
    import time

    out = tmp_path / "run"
    log = out / "_logs" / "wikipedia.log"  # a forked stage's command line is the fork server's
    # A smaller synthetic sample: the stages before this one are done sooner; the Beam job
    # still takes seconds to start.
    small = ["sources.demo.synthetic_train=120", "sources.demo.synthetic_dev=40"]
    runner_p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipelines.run",
            "--output",
            str(out),
            *[a for s in small for a in ("--set", s)],
        ],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def stage_pids() -> list[int]:
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != runner_p.pid:
                try:
                    cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if str(out) in cmd and "pipelines.wikipedia" in cmd:  # a stage of 10-20 s
                    pids.append(int(d.name))
                elif "multiprocessing.forkserver" in cmd and _writes_to(d, log):  # forked
                    pids.append(int(d.name))
        return pids

    try:
        # Only bounds a failure: the runner's fork server imports torch, Beam and BERT before
        # the first stage, 9 minutes at a load of 28 on the shared 2 cores.
        deadline = time.monotonic() + 900
        while not stage_pids() and time.monotonic() < deadline:
            assert runner_p.poll() is None, "the runner ended before the wikipedia stage"
            time.sleep(0.1)
        assert stage_pids(), "the wikipedia stage did not start within 900 s"
        time.sleep(1)
    finally:  # the kill under test; after a failure above, no whole demo run left going on
        os.kill(runner_p.pid, signal.SIGKILL)
        runner_p.wait()
    deadline = time.monotonic() + 4
    while stage_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not stage_pids(), "a stage outlived the runner"
    p = cli("--output", str(out), "--dry-run")
    assert p.returncode == 0, p.stderr


def _writes_to(proc: Path, log: Path) -> bool:
    """Whether the process's stdout is ``log``."""
    try:
        return os.readlink(proc / "fd" / "1") == os.path.realpath(log)
    except OSError:
        return False


def _one_command_stage(name: str, command: Callable[[], list[str]]):
    """A stage of one command (no config keys, no inputs or outputs), not declared in STAGES."""
    from pipelines.run.declare import Stage

    return Stage(
        name=name,
        what="a test stage",
        reads=lambda ctx: (),
        inputs=(),
        optional_inputs=(),
        outputs=lambda ctx: [],
        files=lambda ctx: [],
        commands=lambda ctx: [command()],
        off=lambda ctx: None,
    )


def test_a_stage_failing_again_shows_only_this_attempts_lines(tmp_path: Path):
    """The tail a failed stage shows was the end of a log every attempt appended
    to, so a short second failure showed the first attempt's lines as its own."""
    from pipelines.run.execute import StageFailed, run_stage
    from pipelines.run.plan import Plan

    said = iter(["first attempt's error", "second attempt's error"])
    script = "import sys; print(sys.argv[1]); sys.exit(3)"
    st = _one_command_stage("flaky", lambda: [sys.executable, "-c", script, next(said)])
    ctx = Context(
        out=tmp_path, base=tmp_path, synthetic=False, config_file=tmp_path / "c.yaml", cfg={}
    )
    tails = []
    for _ in range(2):
        with pytest.raises(StageFailed) as e:
            run_stage(Plan(st, "run", "test", key="k"), ctx)
        assert e.value.rc == 3
        tails.append("\n".join(e.value.tail))
    assert "second attempt's error" in tails[1] and "first attempt's error" not in tails[1]
    assert "attempt 2" in tails[1]
    # The earlier attempt's log is kept beside this one's.
    logs = tmp_path / "_logs"
    assert "first attempt's error" in (logs / "flaky.1.log").read_text(encoding="utf-8")
    assert "first attempt's error" not in (logs / "flaky.log").read_text(encoding="utf-8")
