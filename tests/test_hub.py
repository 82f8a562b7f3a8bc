"""Watch and share a trained agent: videos of the evaluation games, the Hugging Face Hub folder of a run (model card,
replay, model, logs, script), loading models from the hub, CleanRL's own model files, and the one-line errors.

Nothing here reaches the live hub. The push runs up to huggingface_hub's transfer call: `--dry-run`, a closed port as
the endpoint (HF_ENDPOINT) and offline mode (HF_HUB_OFFLINE). Downloads go through `hf_hub_download` in offline mode,
served from a huggingface_hub cache that the test fills in the library's documented layout (checked with the
library's own `scan_cache_dir`); a missing file is answered by a local server the way the hub answers one (404,
`X-Error-Code: EntryNotFound`).
"""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import cv2
import pytest
import torch
import tyro
from helpers import REPO_ROOT, fill_hub_cache, load_script

from cleanrl_utils.validation import computed_fields

BREAKOUT = "BreakoutNoFrameskip-v4"
TINY_RUN = [
    "--total-timesteps",
    "256",
    "--num-envs",
    "2",
    "--num-steps",
    "32",
    "--torch-threads",
    "1",
    "--no-progress-bar",
    "--seed",
    "3",
]


def run(args: list[str], cwd: Path, hf_home: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """`python ARGS` in `cwd` with huggingface_hub's home in `hf_home`, no token and no HF_* setting of this machine."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    full.update(PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", HF_HOME=str(hf_home), **env)
    args = [str(REPO_ROOT / a) if a.endswith(".py") else a for a in args]
    return subprocess.run([sys.executable, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)


def error_line(res: subprocess.CompletedProcess) -> str:
    """The process's one-line error (and that it is the only thing on stderr: no traceback)."""
    assert res.returncode != 0, res.stdout[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-3000:]
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def frames(path: Path) -> int:
    """The frames of an mp4, read back one by one with OpenCV (its container's count must agree)."""
    video = cv2.VideoCapture(str(path))
    assert video.isOpened(), path
    count = 0
    while video.read()[0]:
        count += 1
    assert count == int(video.get(cv2.CAP_PROP_FRAME_COUNT)) and video.get(cv2.CAP_PROP_FPS) == 60
    video.release()
    return count


def games(stdout: str) -> list[tuple[int, float, int]]:
    """(game, return, length in emulator frames) of each `eval episode k of N` line."""
    found = re.findall(r"eval episode (\d+) of \d+: return (-?[\d.]+), length (\d+)", stdout)
    return [(int(k), float(r), int(n)) for k, r, n in found]


def fresh_agent_file(folder: Path, cleanrl_format: bool = False) -> Path:
    """An untrained Atari agent of cleanrl/ppo_atari.py saved as --save-model does, or as CleanRL's script does."""
    from cleanrl_utils.atari_wrappers import make_atari_env

    ppo_atari = load_script("cleanrl/ppo_atari.py", "ppo_atari_for_hub")
    env = make_atari_env(BREAKOUT)
    env.single_action_space, env.single_observation_space = env.action_space, env.observation_space
    torch.manual_seed(0)
    agent = ppo_atari.Agent(env)
    env.close()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ppo_atari.cleanrl_model"
    torch.save(agent.state_dict() if cleanrl_format else {"model": agent.state_dict(), "env_id": BREAKOUT}, path)
    return path


@pytest.fixture(scope="module")
def uploaded_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """A short Breakout training run with --upload-model --hf-entity me, its push sent to a closed port: its output
    and its run folder. The run is also the trained model of the push tests (--upload-model implies --save-model,
    which the upload test checks): one training run instead of two."""
    where = tmp_path_factory.mktemp("train")
    res = run(
        ["cleanrl/ppo_atari.py", *TINY_RUN, "--upload-model", "--hf-entity", "me"],
        where,
        where / "hf",
        HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        HF_TOKEN="hf_test",
    )
    (run_dir,) = (where / "runs").iterdir()
    return res, run_dir


@pytest.fixture(scope="module")
def trained_run(uploaded_run) -> Path:
    """The run folder of a short Breakout training run that saved its model."""
    res, run_dir = uploaded_run
    assert (run_dir / "ppo_atari.cleanrl_model").exists() and (run_dir / "checkpoint.pt").exists(), res.stderr[-2000:]
    return run_dir


def own_copy(run_dir: Path, tmp_path: Path) -> Path:
    """A test's own copy of the trained run as training left it: a push writes its folder into the run (the upload
    at the run's end wrote one, for another repository), and a test beside it in the same worker may have written
    one there already."""
    copy = Path(shutil.copytree(run_dir, tmp_path / "runs" / run_dir.name))
    shutil.rmtree(copy / "huggingface", ignore_errors=True)
    return copy


# ---------------------------------------------------------------- videos


def test_capture_video_records_each_whole_game_frame_by_frame_beside_the_model(tmp_path):
    model = fresh_agent_file(tmp_path / "run")
    before = {p for p in tmp_path.rglob("*")}
    res = run(
        [
            "-m",
            "cleanrl_utils.evals.ppo_eval",
            "--model-path",
            str(model),
            "--eval-episodes",
            "2",
            "--capture-video",
            "--no-cuda",
        ],
        tmp_path,
        tmp_path / "hf",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    played = games(res.stdout)
    assert [k for k, _, _ in played] == [1, 2]
    videos = tmp_path / "run" / "videos"
    assert f"videos of the 2 games in {videos}" in res.stdout
    expected = {f"game{k}_return{r:g}.mp4": length for k, r, length in played}
    assert {p.name for p in videos.iterdir()} == set(expected)
    for name, length in expected.items():
        assert frames(videos / name) == length  # one video frame per emulator frame of the game, all lives
        assert f"video {videos / name}" in res.stdout
    height, width = cv2.VideoCapture(str(videos / name)).read()[1].shape[:2]
    assert (height, width) == (210, 160)  # the emulator's screen, not the network's 84x84
    written = {p for p in tmp_path.rglob("*")} - before
    assert written == {videos, *(videos / n for n in expected)}, written  # nothing anywhere else


# ---------------------------------------------------------------- CleanRL's model files


def test_a_cleanrl_state_dict_is_our_network_and_plays_the_game_given(tmp_path):
    from cleanrl_utils.evals.ppo_eval import evaluate

    ours = fresh_agent_file(tmp_path / "ours")
    theirs = fresh_agent_file(tmp_path / "cleanrl", cleanrl_format=True)
    weights = torch.load(theirs, weights_only=True)
    assert list(weights)[:2] == ["network.0.weight", "network.0.bias"] and weights["actor.weight"].shape == (4, 512)
    assert set(weights) == {
        "network.0.weight",
        "network.0.bias",
        "network.2.weight",
        "network.2.bias",
        "network.4.weight",
        "network.4.bias",
        "network.7.weight",
        "network.7.bias",
        "actor.weight",
        "actor.bias",
        "critic.weight",
        "critic.bias",
    }
    assert evaluate(str(theirs), BREAKOUT, eval_episodes=1, seed=5) == evaluate(str(ours), eval_episodes=1, seed=5)
    with pytest.raises(SystemExit, match=r"^error: .* does not say which env it was trained on; pass --env-id$"):
        evaluate(str(theirs))
    with pytest.raises(
        SystemExit,
        match=r"^error: the model in .* does not fit 'PongNoFrameskip-v4': it plays 4 actions and the game has 6 "
        r"\(it was trained on another game; pass that game's --env-id\)$",
    ):
        evaluate(str(theirs), "PongNoFrameskip-v4")


# ---------------------------------------------------------------- the repository's folder


@pytest.mark.slow
def test_dry_run_writes_the_folder_whose_card_and_model_read_back(trained_run, tmp_path):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard import metadata_load

    from cleanrl_utils.evals.ppo_eval import evaluate

    trained_run = own_copy(trained_run, tmp_path)

    res = run(
        [
            "-m",
            "cleanrl_utils.huggingface",
            "push",
            "--run-dir",
            str(trained_run),
            "--repo-id",
            "me/breakout",
            "--eval-episodes",
            "2",
            "--dry-run",
        ],
        tmp_path,
        tmp_path / "hf",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    folder = trained_run / "huggingface"
    events = [p.name for p in trained_run.glob("events.out.tfevents.*")]
    assert events and sorted(p.name for p in folder.iterdir()) == sorted(
        ["README.md", "replay.mp4", "ppo_atari.cleanrl_model", "ppo_atari.py", *events]
    )
    assert "nothing was sent" in res.stdout and all(f"\n  {name} (" in res.stdout for name in events)
    assert not list(trained_run.glob(".eval-videos-*"))  # the other games' videos are not left behind

    played = games(res.stdout)
    returns = [r for _, r, _ in played]
    mean, std = torch.tensor(returns).mean().item(), torch.tensor(returns).std(unbiased=False).item()
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "cleanrl" and BREAKOUT in card.data.tags
    (result,) = card.data.eval_results
    assert (result.dataset_type, result.metric_type) == (BREAKOUT, "mean_reward")
    assert result.metric_value == f"{mean:.2f} +/- {std:.2f}"
    assert (
        metadata_load(folder / "README.md")["model-index"][0]["results"][0]["metrics"][0]["value"]
        == f"{mean:.2f} +/- {std:.2f}"
    )
    assert frames(folder / "replay.mp4") == played[-1][2]  # the last game

    # the script as it ran, and the command that trains the model again: the run's settings, flag for flag
    assert (folder / "ppo_atari.py").read_text() == (REPO_ROOT / "cleanrl" / "ppo_atari.py").read_text()
    command = re.search(r"```bash\n(python cleanrl/ppo_atari\.py .*)\n```", card.text).group(1).split()
    settings = torch.load(trained_run / "checkpoint.pt", weights_only=True)["settings"]
    args = tyro.cli(load_script("cleanrl/ppo_atari.py", "ppo_atari_card").Args, args=command[2:])
    computed = computed_fields(type(args)) | {"run_name", "runs_dir", "resume"}
    # but for the upload (the run was made with --upload-model --hf-entity me): training again pushes nothing
    upload = {"upload_model", "hf_entity"}
    assert (args.upload_model, args.hf_entity) == (False, "") and settings["upload_model"] and settings["hf_entity"]
    assert {k: v for k, v in vars(args).items() if k not in computed | upload} == {
        k: v for k, v in settings.items() if k not in computed | upload
    }
    assert "--hf-repository me/breakout" in card.text and "pip install -e '.[hub]'" in card.text
    assert evaluate(str(folder / "ppo_atari.cleanrl_model"), eval_episodes=1, seed=2)  # the folder's model plays


@pytest.mark.slow
def test_an_unreachable_hub_keeps_the_folder_and_says_how_to_push_it_later(trained_run, tmp_path):
    trained_run = own_copy(trained_run, tmp_path)
    push = [
        "-m",
        "cleanrl_utils.huggingface",
        "push",
        "--run-dir",
        str(trained_run),
        "--repo-id",
        "me/breakout",
        "--eval-episodes",
        "1",
    ]
    model_bytes = (trained_run / "ppo_atari.cleanrl_model").read_bytes()
    res = run(push, tmp_path, tmp_path / "hf", HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}", HF_TOKEN="hf_test")
    line = error_line(res)
    folder = trained_run / "huggingface"
    assert (
        line.startswith("error: cannot push to the Hugging Face Hub: it is unreachable (")
        and f"the folder {folder} are kept: push it with: " in line
        and f"--run-dir {trained_run} --repo-id me/breakout" in line
    )
    assert "eval episode 1 of 1" in res.stdout and (folder / "README.md").exists() and (folder / "replay.mp4").exists()
    assert (trained_run / "ppo_atari.cleanrl_model").read_bytes() == model_bytes  # the run is untouched
    # the same command again, offline: the folder written for this model is sent as it is, without playing again
    again = run(push, tmp_path, tmp_path / "hf", HF_HUB_OFFLINE="1", HF_TOKEN="hf_test")
    assert "already written for this model" in again.stdout and "eval episode" not in again.stdout
    assert error_line(again).startswith("error: cannot push to the Hugging Face Hub: it is unreachable (offline mode")


@pytest.mark.slow
def test_push_without_a_token_or_with_a_bad_repo_id_is_one_line_before_any_game(trained_run, tmp_path):
    push = ["-m", "cleanrl_utils.huggingface", "push", "--run-dir", str(trained_run)]
    line = error_line(run([*push, "--repo-id", "me/breakout"], tmp_path, tmp_path / "hf"))
    assert line.startswith("error: no Hugging Face token: log in with `hf auth login`") and "HF_TOKEN" in line
    for bad in ("breakout", "me/breakout/v1", "me/bad--name"):
        line = error_line(run([*push, "--repo-id", bad, "--dry-run"], tmp_path, tmp_path / "hf"))
        assert line.startswith(f"error: --repo-id {bad!r} is not a repository id"), line
    # no --repo-id and no --hf-entity: the logged-in user's name, which needs the hub
    line = error_line(run([*push, "--dry-run"], tmp_path, tmp_path / "hf", HF_HUB_OFFLINE="1", HF_TOKEN="hf_test"))
    assert (
        line.startswith("error: --hf-entity is empty and the logged-in user's name cannot be had")
        and "offline mode" in line
    )
    line = error_line(
        run(["-m", "cleanrl_utils.huggingface", "push", "--run-dir", str(tmp_path)], tmp_path, tmp_path / "hf")
    )
    assert "must hold one .cleanrl_model (it holds none): train with --save-model or --upload-model" in line


@pytest.mark.slow
def test_upload_model_saves_the_model_and_pushes_at_the_end_in_a_process_of_its_own(uploaded_run):
    res, run_dir = uploaded_run
    assert (run_dir / "ppo_atari.cleanrl_model").exists() and "model saved to" in res.stdout  # implied --save-model
    assert res.stdout.index("model saved to") < res.stdout.index("eval episode 1 of 10")  # the push came after
    line = error_line(res)  # the push's error, and the run ends with its status
    assert f"--repo-id me/{BREAKOUT}-ppo_atari-seed3" in line and "it is unreachable" in line
    assert (run_dir / "huggingface" / "README.md").exists() and (run_dir / "checkpoint.pt").exists()


# ---------------------------------------------------------------- from the hub


class HubAnswers(http.server.BaseHTTPRequestHandler):
    """Answers every request as the hub answers one for a file a repository does not have."""

    def do_HEAD(self):
        self.send_response(404)
        self.send_header("X-Error-Code", "EntryNotFound")
        self.send_header("X-Error-Message", "Entry not found")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD

    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_enjoy_and_ppo_eval_download_through_the_hub_cache_offline(tmp_path):
    hf_home = tmp_path / "hf"
    ours, theirs = fresh_agent_file(tmp_path / "ours"), fresh_agent_file(tmp_path / "theirs", cleanrl_format=True)
    fill_hub_cache(hf_home, f"cleanrl/{BREAKOUT}-ppo_atari-seed1", {"ppo_atari.cleanrl_model": theirs})
    fill_hub_cache(hf_home, "me/breakout", {"ppo_atari.cleanrl_model": ours})
    offline = {"HF_HUB_OFFLINE": "1"}

    enjoy = run(
        [
            "-m",
            "cleanrl_utils.enjoy",
            "--exp-name",
            "ppo_atari",
            "--env-id",
            BREAKOUT,
            "--eval-episodes",
            "1",
            "--no-cuda",
        ],
        tmp_path,
        hf_home,
        **offline,
    )  # CleanRL's command, CleanRL's file
    assert enjoy.returncode == 0, enjoy.stderr[-2000:]
    assert f"snapshots/{hashlib.sha1(f'cleanrl/{BREAKOUT}-ppo_atari-seed1'.encode()).hexdigest()}" in enjoy.stdout
    ppo_eval = run(
        [
            "-m",
            "cleanrl_utils.evals.ppo_eval",
            "--hf-repository",
            "me/breakout",
            "--eval-episodes",
            "1",
            "--capture-video",
            "--no-cuda",
        ],
        tmp_path,
        hf_home,
        **offline,
    )
    assert ppo_eval.returncode == 0, ppo_eval.stderr[-2000:]
    assert games(enjoy.stdout) == games(ppo_eval.stdout)  # the same network, the same game
    assert [p.name for p in (tmp_path / "videos").iterdir()] == [f"game1_return{games(ppo_eval.stdout)[0][1]:g}.mp4"]

    # a repository the cache does not hold, offline; a file the hub says the repository lacks
    line = error_line(run(["-m", "cleanrl_utils.enjoy", "--hf-entity", "nobody"], tmp_path, hf_home, **offline))
    assert line.startswith(
        f"error: cannot get ppo_atari.cleanrl_model of nobody/{BREAKOUT}-ppo_atari-seed1: the "
        "Hugging Face Hub is unreachable (offline mode is on: HF_HUB_OFFLINE is set)"
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubAnswers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        line = error_line(
            run(
                ["-m", "cleanrl_utils.evals.ppo_eval", "--hf-repository", "me/other", "--exp-name", "ppo"],
                tmp_path,
                hf_home,
                HF_ENDPOINT=f"http://127.0.0.1:{server.server_address[1]}",
            )
        )
    finally:
        server.shutdown()
    assert (
        line == "error: the repository me/other has no file ppo.cleanrl_model: check --exp-name (the model file "
        "is EXP_NAME.cleanrl_model, e.g. ppo_atari.cleanrl_model)"
    )
    line = error_line(run(["-m", "cleanrl_utils.evals.ppo_eval", "--hf-repository", "breakout"], tmp_path, hf_home))
    assert line.startswith("error: --hf-repository 'breakout' is not a repository id: give ENTITY/NAME")


# ---------------------------------------------------------------- faults around a run


HOLD = (
    "import sys, time; from cleanrl_utils.resume import hold_run_folder; hold_run_folder(sys.argv[1]); "
    "print('held', flush=True); time.sleep(600)"
)


@pytest.mark.slow
def test_a_push_of_a_run_another_process_holds_is_refused(trained_run, tmp_path):
    """A run still training has no final model yet: a push, dry or not, stops before it plays or writes anything."""
    copy = own_copy(trained_run, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(copy)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for dry in (["--dry-run"], []):
            push = ["-m", "cleanrl_utils.huggingface", "push", "--run-dir", str(copy), "--repo-id", "me/breakout", *dry]
            res = run(push, tmp_path, tmp_path / "hf", HF_TOKEN="hf_test")
            line = error_line(res)
            assert line.startswith(f"error: {copy} is in use by a run that is still going (host "), line
            assert f"pid {holder.pid}," in line and "push it once the run has ended" in line
            assert "eval episode" not in res.stdout and not (copy / "huggingface").exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_run_with_only_its_checkpoint_is_pushed_with_the_model_taken_from_it(trained_run, tmp_path):
    """A run trained without --save-model: ppo_eval reads its checkpoint.pt, and so does the push."""
    copy = own_copy(trained_run, tmp_path)
    (copy / "ppo_atari.cleanrl_model").unlink()
    before = sorted(p.name for p in copy.iterdir())
    push = ["-m", "cleanrl_utils.huggingface", "push", "--run-dir", str(copy), "--repo-id", "me/breakout"]
    res = run([*push, "--eval-episodes", "1", "--dry-run"], tmp_path, tmp_path / "hf")
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"note: {copy} has no .cleanrl_model (no --save-model): pushing the model of its checkpoint.pt" in res.stdout
    pushed = torch.load(copy / "huggingface" / "ppo_atari.cleanrl_model", weights_only=True)
    agent = torch.load(copy / "checkpoint.pt", weights_only=True)["state"]["agent"]
    assert pushed["env_id"] == BREAKOUT and pushed["model"].keys() == agent.keys()
    assert all(torch.equal(pushed["model"][k], agent[k]) for k in agent)
    assert sorted(p.name for p in copy.iterdir()) == sorted([*before, "huggingface"])  # no model file left in the run


def test_enjoy_without_the_hub_uses_the_cache_at_once_or_says_what_enjoy_can_do(tmp_path):
    """The hub's address refuses: no retries (they took about 25 s, each a warning line), the cached model plays; a
    model not in the cache is one line pointing to ppo_eval, not to a --model-path that enjoy does not have."""
    hf_home = tmp_path / "hf"
    fill_hub_cache(hf_home, "me/breakout", {"ppo_atari.cleanrl_model": fresh_agent_file(tmp_path / "ours")})
    away = {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}
    enjoy = ["-m", "cleanrl_utils.enjoy", "--eval-episodes", "1", "--no-cuda"]
    res = run([*enjoy, "--hf-repository", "me/breakout"], tmp_path, hf_home, **away)
    assert res.returncode == 0 and res.stderr == "", res.stderr[-2000:]
    assert games(res.stdout)
    line = error_line(run(enjoy, tmp_path, hf_home, **away))
    assert line.startswith(f"error: cannot get ppo_atari.cleanrl_model of cleanrl/{BREAKOUT}-ppo_atari-seed1: the ")
    assert "Hugging Face Hub is unreachable (127.0.0.1: Connection refused)" in line
    assert line.endswith(
        "copy the file and evaluate it with `python -m cleanrl_utils.evals.ppo_eval --model-path FILE`"
    )


def test_the_eval_checks_its_video_folder_before_it_plays(tmp_path, read_only):
    """A --video-dir that cannot be made or written: one line before the first game, not ffmpeg's broken pipe."""
    model = fresh_agent_file(tmp_path / "run")
    (tmp_path / "a_file").write_text("")
    (tmp_path / "shut").mkdir()
    eval_ = ["-m", "cleanrl_utils.evals.ppo_eval", "--model-path", str(model), "--capture-video", "--no-cuda"]
    blocked = tmp_path / "a_file" / "videos"
    res = run([*eval_, "--video-dir", str(blocked)], tmp_path, tmp_path / "hf")
    assert (
        error_line(res)
        == f"error: cannot write the videos to {str(blocked)!r} (a file is in the way): pass a writable --video-dir"
    )
    assert "eval episode" not in res.stdout
    read_only(tmp_path / "shut")
    res = run([*eval_, "--video-dir", str(tmp_path / "shut")], tmp_path, tmp_path / "hf")
    assert (
        "(Read-only file system): pass a writable --video-dir" in error_line(res) and "eval episode" not in res.stdout
    )
