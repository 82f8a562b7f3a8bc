"""Resume from the run's own settings (cleanrl_utils/resume.py: start_run), the same for both Atari scripts:
--resume auto, the stop hint run verbatim, changed flags refused, a complete run, a larger --total-timesteps, and no
empty run folder after a refused start; in-process, the settings a resume parses and those of the multi-GPU script's
ranks and torchrun restarts (cleanrl_utils/elastic.py: start_rank_run)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
import torch
from helpers import FAST, REPO_ROOT, assert_one_line_error, load_script, read_scalars, start_script, wait_for, run_each


from cleanrl_utils import checkpoint, distributed, elastic, resume

SCRIPTS = ["cleanrl/ppo_atari.py", "cleanrl/ppo_atari_multigpu.py"]
# a run with non-default flags (env, rate, sizes): a resume must not need any of them again; 32 steps an iteration
BATCH = 32
CUSTOM = [
    "--env-id",
    "PongNoFrameskip-v4",
    "--learning-rate",
    "1e-3",
    "--num-envs",
    "2",
    "--num-steps",
    "16",
    "--num-minibatches",
    "2",
    "--update-epochs",
    "1",
    "--vector-env",
    "sync",
    "--no-progress-bar",
]


def steps(run_dir, tag="charts/learning_rate") -> list[int]:
    return [step for step, _ in read_scalars(run_dir, tag)]


def stored_run(runs, name: str, args, iteration: int = 1) -> str:
    """A checkpoint of `args` at `iteration` in runs/name (no networks: start_run reads only the settings)."""
    (runs / name).mkdir(parents=True)
    settings = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(args).items()}
    torch.save(
        {
            "format": checkpoint.CHECKPOINT_FORMAT,
            "state": {},
            "iteration": iteration,
            "global_step": iteration * 32,
            "batch_size": 32,
            "rng": [],
            "settings": settings,
        },
        runs / name / checkpoint.CHECKPOINT_FILE,
    )
    return name


def test_a_resume_parses_the_command_line_over_the_stored_settings(tmp_path, capsys):
    base = load_script("cleanrl/ppo_atari.py", "ppo_atari_resume_under_test")
    runs = tmp_path / "runs"
    stored = base.Args(env_id="PongNoFrameskip-v4", learning_rate=1e-3, anneal_lr=False, total_timesteps=640)
    where = ["--resume", "--run-name", stored_run(runs, "r", stored), "--runs-dir", str(runs)]
    # flags not given take the run's values; given ones with the run's value pass, in any spelling
    same = ["--learning_rate=1e-3", "--no-anneal-lr", "--env-id", "PongNoFrameskip-v4"]
    args, name, ckpt = resume.start_run(base.Args, "ppo_atari.py", [*where, *same])
    assert (args.env_id, args.learning_rate, args.anneal_lr, args.total_timesteps) == (
        "PongNoFrameskip-v4",
        1e-3,
        False,
        640,
    )
    assert (name, args.run_name, args.resume, ckpt["iteration"]) == ("r", "r", "yes", 1)
    assert capsys.readouterr().out == ""
    # another value: refused, naming each flag, unless a resume may change it (then a note)
    with pytest.raises(SystemExit) as refused:
        resume.start_run(base.Args, "ppo_atari.py", [*where, "--anneal-lr", "--clip-coef", "0.3", "--bf16"])
    assert "--anneal-lr (the run has --no-anneal-lr), --clip-coef 0.3 (the run has --clip-coef 0.1)" in str(
        refused.value.code
    ) and "bf16" not in str(refused.value.code)
    args, _, _ = resume.start_run(base.Args, "ppo_atari.py", [*where, "--bf16", "--total-timesteps", "1e3"])
    assert args.bf16 and args.total_timesteps == 1000
    out = capsys.readouterr().out
    assert "note: resuming with --total-timesteps 1000 (the run has --total-timesteps 640)" in out
    assert "note: resuming with --bf16 (the run has --no-bf16)" in out


def test_a_resume_parses_the_command_line_once(tmp_path, monkeypatch):
    """The run's settings fill in the flags the line leaves out: tyro runs once, not again with them as defaults."""
    base = load_script("cleanrl/ppo_atari.py", "ppo_atari_parse_once_under_test")
    runs = tmp_path / "runs"
    where = ["--resume", "--run-name", stored_run(runs, "r", base.Args(total_timesteps=640)), "--runs-dir", str(runs)]
    parse, calls = resume.tyro.cli, []
    monkeypatch.setattr(resume.tyro, "cli", lambda *a, **k: calls.append(a) or parse(*a, **k))
    args, _, ckpt = resume.start_run(base.Args, "ppo_atari.py", where)
    assert len(calls) == 1 and ckpt is not None and args.total_timesteps == 640


def test_multigpu_ranks_and_restarts_resume_the_same_run(tmp_path, capsys, monkeypatch):
    mg = load_script("cleanrl/ppo_atari_multigpu.py", "ppo_atari_multigpu_resume_under_test")
    runs = tmp_path / "runs"
    stored = mg.Args(learning_rate=1e-3, total_timesteps=4096)
    distributed.resolve_sizes(stored, 2)  # 8 envs per rank, 16 in all
    run = stored_run(runs, f"{stored.env_id}__{stored.exp_name}__1__100", stored)
    monkeypatch.chdir(tmp_path)
    info = [distributed.DistInfo(rank, 4, rank, 4, True, "torchrun") for rank in range(2)]
    # 4 ranks now: the envs per rank follow the world size (8 stored); rank 0 alone prints
    streams = sys.stdout, sys.stderr
    for rank in (1, 0):
        monkeypatch.setattr("sys.argv", ["ppo_atari_multigpu.py", "--resume", "--local-num-envs", "4"])
        args, name, ckpt = elastic.start_rank_run(mg.Args, "ppo_atari_multigpu.py", info[rank])
        assert (sys.stdout is distributed.HUSHED) == (rank == 1)  # until its group forms (not in this test)
        sys.stdout, sys.stderr = streams
        assert (name, args.learning_rate, args.local_num_envs, args.num_envs) == (run, 1e-3, 4, 16)
        out = capsys.readouterr().out
        assert out == ("" if rank else "note: resuming with --local-num-envs 4 (the run has --local-num-envs 8)\n")
    monkeypatch.setattr("sys.argv", ["ppo_atari_multigpu.py", "--resume"])
    args, _, _ = elastic.start_rank_run(mg.Args, "ppo_atari_multigpu.py", info[0])
    assert args.local_num_envs is None and args.num_envs == 16  # resolve_sizes derives 4 per rank
    # a torchrun restart without --resume continues the run that recorded the job's id, not a newer one
    stored_run(runs, f"{stored.env_id}__{stored.exp_name}__1__200", stored)
    (runs / run / elastic.ELASTIC_ID_FILE).write_text("job7")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    monkeypatch.setattr("sys.argv", ["ppo_atari_multigpu.py"])
    for rank in (1, 0):
        args, name, ckpt = elastic.start_rank_run(mg.Args, "ppo_atari_multigpu.py", info[rank])
        assert (name, args.run_name, args.resume, args.learning_rate, ckpt is not None) == (run, None, "no", 1e-3, True)
    capsys.readouterr()


def hyperparameter_texts(run_dir) -> list[tuple[int, str]]:
    """(step, text) of every `hyperparameters` text the run logged, by step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    acc.Reload()
    events = acc.Tensors("hyperparameters/text_summary")
    return sorted((e.step, e.tensor_proto.string_val[0].decode()) for e in events)


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_stop_hint_verbatim_resumes_then_extends_and_refuses_changes(script, tmp_path):
    runs = tmp_path / "runs"
    log = tmp_path / "first.log"
    proc = start_script(
        [
            script,
            *CUSTOM,
            "--total-timesteps",
            str(20 * BATCH),
            "--checkpoint-interval",
            "1",
            "--runs-dir",
            str(runs),
            "--run-name",
            "cut",
            "--resume",
            "auto",
        ],
        tmp_path,
        log,
        env=FAST,
    )
    try:
        wait_for(log, "checkpoint: iteration 1,", proc, timeout=300)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    # --resume auto started the run, which had no checkpoint
    assert f"note: no checkpoint in {runs / 'cut'} yet: starting the run" in log.read_text()
    hint = re.search(r"resume with: (.+)", log.read_text()).group(1)
    assert "--resume --run-name cut" in hint and "Pong" not in hint and "--num-envs" not in hint, hint

    # the hint as printed: continues with the run's own settings, up to the stored --total-timesteps
    env = {**os.environ, **FAST, "PYTHONPATH": str(REPO_ROOT)}
    res = subprocess.run(["bash", "-c", hint], cwd=tmp_path, capture_output=True, text=True, timeout=400, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "resuming from iteration" in res.stdout
    run_dir = runs / "cut"
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert (ckpt["env_id"], ckpt["global_step"], ckpt["settings"]["learning_rate"]) == ("PongNoFrameskip-v4", 640, 1e-3)
    assert steps(run_dir) == [BATCH * i for i in range(1, 21)]

    # then, one forked child each (see `run_each`): a resume of the complete run; one with changed settings; one with
    # a larger --total-timesteps; a start without --resume
    where = ["--run-name", "cut", "--runs-dir", str(runs)]
    changed = ["--learning-rate", "2e-3", "--clip-coef", "0.3", "--seed", "7", "--num-envs", "2"]
    again, refused, longer, anew = run_each(
        [
            ([script, "--resume", *where], tmp_path),
            ([script, "--resume", *where, *changed], tmp_path),
            ([script, "--resume", *where, "--total-timesteps", str(22 * BATCH)], tmp_path),
            ([script, *where], tmp_path),
        ],
        env=FAST,
        train=True,
    )

    # complete: says so, exits 0, changes nothing
    assert again.returncode == 0 and "run cut is complete: global step 640" in again.stdout, again.stderr
    assert "sweep" not in again.stdout  # a run named by --run-name is no sweep's: no hint about sweeps

    # changed settings: refused in one line naming every one of them
    assert_one_line_error(refused, "--learning-rate 0.002 (the run has --learning-rate 0.001)")
    assert "--clip-coef 0.3" in refused.stderr and "--seed 7" in refused.stderr and "--num-envs" not in refused.stderr
    assert "sweep" not in refused.stderr  # (a sweep's run, named ENV__EXP__SEED, is told of --exp-name)

    # a larger --total-timesteps extends the finished run; the learning rate anneals to the new end
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert "note: resuming with --total-timesteps 704 (the run has --total-timesteps 640)" in longer.stdout
    assert "note: the learning rate now anneals to 0 at step 704" in longer.stdout
    assert steps(run_dir) == [BATCH * i for i in range(1, 23)]
    rates = dict(read_scalars(run_dir, "charts/learning_rate"))
    assert rates[21 * BATCH] == pytest.approx(1e-3 * (1 - 20 / 22), rel=1e-5)
    assert len(list(runs.iterdir())) == 1
    # TensorBoard's TEXT tab: the settings the run started with, then those of each resume, at its step
    settings = hyperparameter_texts(run_dir)
    assert [step for step, _ in settings][0] == 0 and "|total_timesteps|640|" in settings[0][1]
    assert settings[-1][0] == 640 and "|total_timesteps|704|" in settings[-1][1]

    # a start without --resume never overwrites a run that has a checkpoint
    assert_one_line_error(anew, "already has a checkpoint: pass --resume")


def test_resume_without_a_checkpoint_and_no_empty_folder(tmp_path):
    """Both scripts (one forked child each, see `run_each`): --resume of a run that does not exist is refused in one
    line, and a refused start (a missing extra, checked before the folder is made) leaves no run folder behind."""
    # wandb made unimportable for the run
    code = (
        "import sys, runpy; sys.modules['wandb'] = None; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    cases = []
    for script in SCRIPTS:
        cwd = tmp_path / script.split("/")[-1]
        cwd.mkdir()
        base = [script, *CUSTOM, "--runs-dir", str(cwd / "runs"), "--run-name", "new"]
        cases += [([*base, "--resume"], cwd), (["-c", code, *base, "--track"], cwd)]
    results = run_each(cases, env=FAST)
    for (_, cwd), missing, track in zip(cases[::2], results[::2], results[1::2]):
        assert_one_line_error(missing, "no checkpoint to resume in")
        assert_one_line_error(track, "--track needs wandb")
        assert not (cwd / "runs").exists() or not list((cwd / "runs").iterdir())
