# The image the jobs of cleanrl_utils/submit_exp.py run on AWS Batch: this repository installed with PyTorch,
# working directory /cleanrl, so job commands such as `torchrun ... cleanrl/ppo_atari_multigpu.py` run as in a checkout.
#   docker build -t cleanrl-throughput .                       # CUDA build of torch (g5/p3/p4d instances)
#   docker build -t cleanrl-throughput:cpu --build-arg TORCH_INDEX_URL=<PyTorch's CPU wheel index> .
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# torch first and alone: the biggest layer, rebuilt only when its version changes
RUN pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION}"

WORKDIR /cleanrl
COPY . .
# the `track` extra brings wandb for --track runs; the key reaches the job as WANDB_API_KEY (see submit_exp.py)
RUN pip install -e ".[track]"

CMD ["python", "cleanrl/ppo_atari.py", "--help"]
