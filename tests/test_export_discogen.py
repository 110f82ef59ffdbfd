"""`metadisco export --format discogen`: the written loss.py, imported on its own, gives the same
loss and gradients as metadisco's own ppo_loss with the same objectives, on random inputs and a
stand-in network that returns a distribution with log_prob / entropy and a value."""

import importlib.util
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from metadisco.analysis.export import export_discogen
from metadisco.inner_loops import PPOConfig, make_env
from metadisco.inner_loops.ppo import PPO, Batch, PPOHyperparams, ppo_loss
from metadisco.meta_objectives import ClosedFormDrift, ClosedFormValueLoss, Objectives
from metadisco.meta_objectives.formulas import dpo_expression

pytestmark = pytest.mark.timeout(120)


class Transition(NamedTuple):  # PureJaxRL's fields that the loss reads
    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array


class Categorical:
    def __init__(self, logits):
        self.logp = jax.nn.log_softmax(logits)

    def log_prob(self, action):
        return jnp.take_along_axis(self.logp, action[..., None], axis=-1)[..., 0]

    def entropy(self):
        return -jnp.sum(jnp.exp(self.logp) * self.logp, axis=-1)


class StandIn:
    """DiscoGen's network contract over metadisco's actor-critic: apply -> (pi, value)."""

    def __init__(self, network):
        self.network = network

    def apply(self, params, obs):
        logits, value = self.network.apply(params, obs)
        return Categorical(logits), value


class RecurrentStandIn:
    """DiscoGen's recurrent backend's contract over metadisco's recurrent actor-critic:
    apply(params, carry, (obs, done)) -> (carry, pi, value) over [T, E] sequences."""

    def __init__(self, network):
        self.network = network

    def apply(self, params, carry, inputs):
        obs, done = inputs
        carry, logits, value = self.network.apply(params, carry, obs, done)
        return carry, Categorical(logits), value


def _load(path):
    spec = importlib.util.spec_from_file_location("discogen_loss", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ASYMMETRIC = "e**2/2 + 0.3*Piecewise((e**2/2, e < 0), (0, True))"
CLIPPED = {"base": "clipped_l2", "clip_eps": 0.3}  # not the config's CLIP_EPS: the loss keeps its own


@pytest.mark.parametrize("value_loss, base", [(None, None), (ASYMMETRIC, None), (ASYMMETRIC, CLIPPED)])
def test_discogen_loss_equals_ppo_loss_in_value_and_gradient(tmp_path, value_loss, base):
    """With a value loss on the clipped base (distilled from learned_clipped), loss.py applies
    PPO's value clipping at that base's clip_eps, as metadisco's ClosedFormValueLoss does."""
    drift = f"(1 - p)*({dpo_expression(1.3, 0.9)}) + p*0.5*Max(0, r - 1.1)**2"
    module = _load(export_discogen(drift, tmp_path, value_loss=value_loss, value_loss_base=base))
    assert "import jax.numpy as jnp" in open(tmp_path / "loss.py").read()
    assert not [line for line in open(tmp_path / "loss.py") if line.startswith(("import", "from"))
                and "jax" not in line]

    objectives = Objectives(drift=ClosedFormDrift(drift),
                            **({"value_loss": ClosedFormValueLoss(value_loss, **(base or {}))} if value_loss else {}))
    ppo = PPO.create(make_env("CartPole-v1"), PPOConfig(hidden=(16,)), objectives)
    n = 256
    keys = jax.random.split(jax.random.key(0), 6)
    params = ppo.network.init(keys[0], jnp.zeros((1, 4)))
    batch = Batch(obs=jax.random.normal(keys[1], (n, 4)), action=jax.random.bernoulli(keys[2], 0.5, (n,)).astype(jnp.int32),
                  log_prob=jnp.log(0.5) + 0.4 * jax.random.normal(keys[3], (n,)),
                  value=jax.random.normal(keys[4], (n,)), advantage=2.0 * jax.random.normal(keys[5], (n,)) + 0.3,
                  target=jax.random.normal(keys[5], (n,)) * 1.5)
    hp = PPOHyperparams(vf_coef=0.5, ent_coef=0.01)
    progress = 0.3
    config = {"CLIP_EPS": 0.2, "VF_COEF": hp.vf_coef, "ENT_COEF": hp.ent_coef, "PROGRESS": progress}
    traj = Transition(batch.obs, batch.action, batch.log_prob, batch.value)

    def discogen_loss(params):
        return module.loss_actor_and_critic(params, traj, batch.advantage, batch.target, StandIn(ppo.network), config)

    def metadisco_loss(params):
        return ppo_loss(ppo, params, batch, objectives.default_params(), progress, hp)

    (t_total, (t_value, t_actor, t_entropy)), (o_total, aux) = discogen_loss(params), metadisco_loss(params)
    np.testing.assert_allclose(t_total, o_total, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([t_value, t_actor, t_entropy], [aux.value_loss, aux.policy_loss, aux.entropy],
                               rtol=1e-5, atol=1e-6)
    g_discogen = jax.grad(lambda p: discogen_loss(p)[0])(params)
    g_metadisco = jax.grad(lambda p: metadisco_loss(p)[0])(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), g_discogen, g_metadisco)
    assert float(jnp.abs(jax.tree.leaves(g_metadisco)[0]).max()) > 0
    if base is not None:  # the clipping is applied, not dropped: the base-less loss differs here
        bare_objectives = objectives.replace(value_loss=ClosedFormValueLoss(value_loss))
        bare_ppo = PPO.create(make_env("CartPole-v1"), PPOConfig(hidden=(16,)), bare_objectives)
        bare = ppo_loss(bare_ppo, params, batch, bare_objectives.default_params(), progress, hp)[1]
        assert abs(float(bare.value_loss) - float(t_value)) > 1e-3


def test_discogen_export_refuses_an_invalid_drift_and_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="dD/dr"):
        export_discogen("(r - 1)**2 + 0.1*(r - 1)*A", tmp_path)
    assert not (tmp_path / "loss.py").exists()


def _minimal_inputs(n=64):
    keys = jax.random.split(jax.random.key(1), 4)
    traj = Transition(jax.random.normal(keys[0], (n, 4)), jax.random.bernoulli(keys[1], 0.5, (n,)).astype(jnp.int32),
                      jnp.log(0.5) + 0.4 * jax.random.normal(keys[2], (n,)), jax.random.normal(keys[3], (n,)))
    return traj, 2.0 * jax.random.normal(keys[3], (n,)), jax.random.normal(keys[2], (n,))


def test_a_progress_dependent_drift_never_runs_silently_at_p_zero_in_discogen(tmp_path):
    """Without config['PROGRESS'] the loss refuses, naming the two lines for train.py; with them,
    the progress it sees is metadisco's (update / NUM_UPDATES), traced through DiscoGen's jit."""
    from metadisco.analysis.export import DISCOGEN_PROGRESS_LINES, drift_uses_progress

    drift = f"(1 - p)*({dpo_expression(1.3, 0.9)}) + p*0.5*Max(0, r - 1.1)**2"
    assert drift_uses_progress(drift) and not drift_uses_progress(dpo_expression(1.3, 0.9))
    module = _load(export_discogen(drift, tmp_path))
    source = (tmp_path / "loss.py").read_text()
    assert all(line in source for line in DISCOGEN_PROGRESS_LINES)
    ppo = PPO.create(make_env("CartPole-v1"), PPOConfig(hidden=(16,)), Objectives(drift=ClosedFormDrift(drift)))
    params = ppo.network.init(jax.random.key(0), jnp.zeros((1, 4)))
    traj, gae, targets = _minimal_inputs()
    config = {"CLIP_EPS": 0.2, "VF_COEF": 0.5, "ENT_COEF": 0.01, "NUM_UPDATES": 10, "UPDATE_EPOCHS": 4,
              "NUM_MINIBATCHES": 2}
    with pytest.raises(KeyError, match="depends on training progress p"):
        module.loss_actor_and_critic(params, traj, gae, targets, StandIn(ppo.network), config)

    class TrainState(NamedTuple):
        step: jax.Array

    @jax.jit
    def their_update_minibatch(train_state, config_values):  # DiscoGen's train.py with the two lines
        config = dict(config_values)
        namespace = {"config": config, "train_state": train_state}
        for line in DISCOGEN_PROGRESS_LINES:
            exec(line, {}, namespace)
        return module.loss_actor_and_critic(params, traj, gae, targets, StandIn(ppo.network), namespace["config"])[0]

    losses = [their_update_minibatch(TrainState(jnp.int32(step)), config) for step in (0, 7, 8, 79)]
    assert float(losses[0]) == pytest.approx(float(losses[1]))  # within one update (8 optimiser steps) p is fixed
    expected = [ppo_loss(ppo, params, Batch(traj.obs, traj.action, traj.log_prob, traj.value, gae, targets),
                         ppo.objectives.default_params(), p, PPOHyperparams(vf_coef=0.5, ent_coef=0.01))[0]
                for p in (0.0, 0.1, 0.9)]
    np.testing.assert_allclose([losses[0], losses[2], losses[3]], expected, rtol=1e-5, atol=1e-6)
    assert abs(float(losses[3]) - float(losses[0])) > 1e-4  # p reaches the loss


def test_a_drift_without_progress_needs_nothing_from_discogen(tmp_path):
    module = _load(export_discogen(dpo_expression(1.3, 0.9), tmp_path))
    assert "PROGRESS" not in (tmp_path / "loss.py").read_text()
    dpo = Objectives(drift=ClosedFormDrift(dpo_expression(1.3, 0.9)))
    ppo = PPO.create(make_env("CartPole-v1"), PPOConfig(hidden=(16,)), dpo)
    params = ppo.network.init(jax.random.key(0), jnp.zeros((1, 4)))
    traj, gae, targets = _minimal_inputs()
    total, _ = module.loss_actor_and_critic(params, traj, gae, targets, StandIn(ppo.network),
                                            {"CLIP_EPS": 0.2, "VF_COEF": 0.5, "ENT_COEF": 0.01})
    assert np.isfinite(float(total))


@pytest.mark.parametrize("network", ["gru", "lstm"])
def test_a_recurrent_runs_discogen_loss_equals_its_ppo_loss_on_the_same_sequences(tmp_path, network):
    """For a recurrent inner loop the loss.py is DiscoGen's recurrent backend's (init_hstate, sequences
    replayed with their reset flags): on the same [T, E] minibatch, from the same carry, it gives
    metadisco's ppo_loss and its gradients."""
    drift, value_loss = dpo_expression(1.3, 0.9), ASYMMETRIC
    path = export_discogen(drift, tmp_path, value_loss=value_loss, recurrent=True)
    source = (tmp_path / "loss.py").read_text()
    assert "def loss_actor_and_critic(params, init_hstate, traj_batch" in source
    assert "template_backend: recurrent" in source
    module = _load(path)
    objectives = Objectives(drift=ClosedFormDrift(drift), value_loss=ClosedFormValueLoss(value_loss))
    ppo = PPO.create(make_env("CartPole-v1"), PPOConfig(network=network, rnn_size=16), objectives)
    t, e = 16, 4
    keys = jax.random.split(jax.random.key(2), 8)
    carry = jax.tree.map(lambda c: jax.random.normal(keys[0], c.shape), ppo.network.initial_carry(e))
    first = jax.random.bernoulli(keys[1], 0.2, (t, e))
    params = ppo.network.init(keys[2], carry, jnp.zeros((1, e, 4)), jnp.zeros((1, e), bool))
    batch = Batch(obs=jax.random.normal(keys[3], (t, e, 4)), action=jax.random.bernoulli(keys[4], 0.5, (t, e)).astype(jnp.int32),
                  log_prob=jnp.log(0.5) + 0.4 * jax.random.normal(keys[5], (t, e)), value=jax.random.normal(keys[6], (t, e)),
                  advantage=2.0 * jax.random.normal(keys[7], (t, e)) + 0.3, target=1.5 * jax.random.normal(keys[0], (t, e)),
                  first=first, hstate=carry)
    hp = PPOHyperparams(vf_coef=0.5, ent_coef=0.01)

    class RecurrentTransition(NamedTuple):  # DiscoGen's recurrent Transition: done = the observation's reset flag
        obs: jax.Array
        action: jax.Array
        log_prob: jax.Array
        value: jax.Array
        done: jax.Array

    traj = RecurrentTransition(batch.obs, batch.action, batch.log_prob, batch.value, batch.first)
    init_hstate = jax.tree.map(lambda c: c[None], carry)  # DiscoGen keeps a leading axis of 1

    def discogen_loss(params):
        return module.loss_actor_and_critic(params, init_hstate, traj, batch.advantage, batch.target,
                                            RecurrentStandIn(ppo.network), {"CLIP_EPS": 0.2, "VF_COEF": 0.5, "ENT_COEF": 0.01})

    def metadisco_loss(params):
        return ppo_loss(ppo, params, batch, objectives.default_params(), 0.0, hp)

    (t_total, (t_value, t_actor, t_entropy)), (o_total, aux) = discogen_loss(params), metadisco_loss(params)
    np.testing.assert_allclose([t_total, t_value, t_actor, t_entropy],
                               [o_total, aux.value_loss, aux.policy_loss, aux.entropy], rtol=1e-5, atol=1e-6)
    g_discogen = jax.grad(lambda p: discogen_loss(p)[0])(params)
    g_metadisco = jax.grad(lambda p: metadisco_loss(p)[0])(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), g_discogen, g_metadisco)
    assert float(jnp.abs(g_metadisco["params"]["cell"][next(iter(g_metadisco["params"]["cell"]))]["kernel"]).max()) > 0
