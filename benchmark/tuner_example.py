"""A CartPole study of ppo.py in a few minutes on 2 cores: 12 trials x 2 seeds of 30k steps, 2 trials at a time,
pruned by the median rule while they run. Run from the repository's root:

    python benchmark/tuner_example.py

Stop it with Ctrl-C and run it again: it continues where it stopped. The study is in studies/ppo_cartpole_example/.
"""

import optuna

from cleanrl_utils.tuner import Tuner

tuner = Tuner(
    script="cleanrl/ppo.py",
    metric="charts/episodic_return",
    metric_last_n_average_window=20,
    direction="maximize",
    aggregation_type="average",
    target_scores={"CartPole-v1": [0, 500]},
    params_fn=lambda trial: {
        "learning-rate": trial.suggest_float("learning-rate", 0.0003, 0.01, log=True),
        "num-minibatches": trial.suggest_categorical("num-minibatches", [1, 2, 4]),
        "update-epochs": trial.suggest_categorical("update-epochs", [1, 2, 4, 8]),
        "ent-coef": trial.suggest_float("ent-coef", 0.0, 0.05),
        "total-timesteps": 30000,
        "num-envs": 4,
        "num-steps": 128,
    },
    pruner=optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=6000),
    sampler=optuna.samplers.TPESampler(seed=1),
    study_name="ppo_cartpole_example",
    workers=2,
)
tuner.tune(num_trials=12, num_seeds=2)
