"""The Hugging Face Hub as both directions need it: repository ids, whether it can be reached, and a model file from
it (through huggingface_hub's cache). Pushing is `huggingface.py`."""

from __future__ import annotations

import os
from typing import Optional

from cleanrl_utils.validation import check_extra, fail, first_sentence

LOGIN = "log in with `hf auth login` (`huggingface-cli login` in older huggingface_hub) or set HF_TOKEN"


def check_repo_id(repo_id: str, flag: str = "--repo-id") -> None:
    """`ENTITY/NAME` with the hub's characters; else one line."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts):
        fail(
            f"{flag} {repo_id!r} is not a repository id: give ENTITY/NAME (a user or organisation, a slash, a name), "
            "e.g. cleanrl/BreakoutNoFrameskip-v4-ppo_atari-seed1"
        )
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        fail(f"{flag} {repo_id!r} is not a repository id: {first_sentence(exc)}")


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the hub could not be reached (offline mode, no connection, no answer)."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    network = ("httpx", "requests", "urllib3")  # huggingface_hub's HTTP clients, older and newer
    return isinstance(exc, (OfflineModeIsEnabled, OSError)) or any(
        kind.__module__.startswith(network) for kind in type(exc).__mro__
    )


def reason(exc: BaseException) -> str:
    from huggingface_hub.errors import OfflineModeIsEnabled

    return "offline mode is on: HF_HUB_OFFLINE is set" if isinstance(exc, OfflineModeIsEnabled) else first_sentence(exc)


def download_model(
    repo_id: str, filename: str, flag: str = "--hf-repository", instead: str = "copy the file and pass --model-path"
) -> str:
    """The local path of `filename` of `repo_id` in huggingface_hub's cache; `instead`: what to do without the hub."""
    check_extra("huggingface_hub", flag, "hub")
    check_repo_id(repo_id, flag)
    cut_off = hub_cut_off()
    from huggingface_hub import errors, hf_hub_download
    from huggingface_hub.constants import HF_HUB_CACHE

    try:
        return hf_hub_download(
            repo_id=repo_id, filename=filename, library_name="cleanrl", local_files_only=bool(cut_off)
        )
    except errors.LocalEntryNotFoundError as exc:  # (first: it is an EntryNotFoundError too)
        why = cut_off or reason(exc.__cause__ or errors.OfflineModeIsEnabled())  # no cause: offline mode
        fail(
            f"cannot get {filename} of {repo_id}: the Hugging Face Hub is unreachable ({why}) and huggingface_hub's "
            f"cache ({HF_HUB_CACHE}) has no copy of it; connect, or {instead}"
        )
    except errors.EntryNotFoundError:
        fail(
            f"the repository {repo_id} has no file {filename}: check --exp-name (the model file is "
            "EXP_NAME.cleanrl_model, e.g. ppo_atari.cleanrl_model)"
        )
    except errors.RepositoryNotFoundError:
        fail(f"no model repository {repo_id} on the Hugging Face Hub (if it is private or gated: {LOGIN})")
    except errors.HfHubHTTPError as exc:
        fail(f"cannot get {filename} of {repo_id} from the Hugging Face Hub: {first_sentence(exc)}")
    except Exception as exc:
        if not unreachable(exc):
            raise
        fail(f"cannot get {filename} of {repo_id}: the Hugging Face Hub is unreachable ({reason(exc)})")


def hub_cut_off(timeout: float = 5.0) -> Optional[str]:
    """Why the hub's address takes no connection, or None (it does, or a proxy or offline mode decides): asked first,
    so that a machine without the hub uses the cache at once instead of after huggingface_hub's retries (about 25 s)."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    proxies = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
    if constants.HF_HUB_OFFLINE or any(os.environ.get(name) for name in proxies):
        return None
    url = urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError as exc:
        return f"{url.hostname}: {exc.strerror or exc or type(exc).__name__}"
    return None
