"""An environment of your own, in gymnax's style, in a file of your own: no edit to metadisco.

    metadisco train envs=my_envs:Corridor                        # from the folder holding this file
    metadisco evaluate RUN_DIR --envs my_envs:Corridor,CartPole-v1

Any class with gymnax 1.0's API works (reset_env/step_env behind gymnax's reset/step, a params
pytree, spaces); metadisco instantiates it with no arguments. Reaching the right end terminates
the episode (no bootstrap); the time limit truncates it (bootstrap), and PPO keeps them apart.
"""

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces


@struct.dataclass
class EnvState(environment.EnvState):
    position: jax.Array  # [] int32, 0 .. length - 1
    time: int


@struct.dataclass
class EnvParams(environment.EnvParams):
    max_steps_in_episode: int = 32
    goal_reward: float = 1.0
    step_cost: float = 0.01


class Corridor(environment.Environment[EnvState, EnvParams]):
    """Walk right (action 1) or left (action 0) along a corridor; the goal is the right end.

    Observation: the one-hot position, [length]. The optimal return is goal_reward minus
    step_cost per step before the goal, reached in length - 1 steps.
    """

    def __init__(self, length: int = 8):
        super().__init__()
        self.length = length

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def reset_env(self, key, params):
        state = EnvState(position=jnp.int32(0), time=0)
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        position = jnp.clip(state.position + jnp.where(action == 1, 1, -1), 0, self.length - 1)
        state = EnvState(position=position, time=state.time + 1)
        terminated = position == self.length - 1
        reward = jnp.where(terminated, params.goal_reward, -params.step_cost)
        return self.get_obs(state), state, reward, terminated, {}

    def get_obs(self, state, params=None, key=None):
        return jax.nn.one_hot(state.position, self.length)

    @property
    def name(self) -> str:
        return "Corridor"

    @property
    def num_actions(self) -> int:
        return 2

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (self.length,), jnp.float32)
