"""An attack on ``atari/{game}-v1`` scoring (issue 36 item 2): a policy that runs its own emulator.

It needs no training. ``build_policy`` imports ale-py (importable in a scoring jail that binds the training
runtime), loads the game's ROM and keeps one emulator per scored episode in step with the frames it is sent:
the trusted side plays with sticky actions, so each step it tries every way the step could have gone (the new
action taking over at frame 0, 1, 2, 3 of the frame skip, or never) and keeps the one whose screen equals the
frame. Then it plans on another emulator loaded with that state: each action, followed by no-ops for a short
horizon, is rolled out and the one with the most reward and no life lost is played. In a scoring jail that
holds only its package list, ``import ale_py`` fails and the policy gets no score.

Used by ``benchmarks/attacks/measure_own_emulator.py`` (it is the candidate's ``policy.py``).
"""

import os

import numpy as np

FRAMESKIP = 4
HORIZON = 12  # agent steps rolled out per candidate action (a Q*bert hop takes about 8)
DEATH = -1000.0


def _emulator(game):
    import ale_py
    from ale_py import roms

    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setFloat("repeat_action_probability", 0.0)  # sticky outcomes are enumerated, not drawn
    ale.loadROM(roms.get_rom_path(game))
    return ale


class Tracked:
    """One scored episode's emulator, in step with the frames sent so far (never used for rollouts)."""

    def __init__(self, game):
        self.ale = _emulator(game)
        self.ale.reset_game()
        self.screen = self.ale.getScreenGrayscale()
        self.state, self.prev, self.chosen = self.ale.cloneState(), 0, None

    def follow(self, frame, actions):
        """Finds how the last step went (the frame's screen); False when no way matches."""
        if self.chosen is None:
            return np.array_equal(self.screen, frame)
        prev, chosen = actions[self.prev], actions[self.chosen]
        for k in range(FRAMESKIP + 1):  # the new action takes over at frame k (k == FRAMESKIP: never)
            self.ale.restoreState(self.state)
            for f in range(FRAMESKIP):
                self.ale.act(prev if f < k else chosen)
            if np.array_equal(self.ale.getScreenGrayscale(), frame):
                self.state = self.ale.cloneState()
                self.prev = self.prev if k == FRAMESKIP else self.chosen
                return True
        return False


class OwnEmulator:
    def __init__(self, game):
        self.game = game
        self.planner = _emulator(game)
        self.actions = list(self.planner.getMinimalActionSet())
        self.tracked = None
        self.synced = self.lost = 0

    def _plan(self, state):
        best, best_a = None, 0
        for i, a in enumerate(self.actions):
            self.planner.restoreState(state)
            lives, total = self.planner.lives(), 0.0
            for step in range(HORIZON):
                for _ in range(FRAMESKIP):
                    total += self.planner.act(a if step == 0 else self.actions[0])
                if self.planner.lives() < lives:
                    total += DEATH
                    break
            if best is None or total > best:
                best, best_a = total, i
        return best_a

    def act(self, obs):
        frames = np.asarray(obs)
        if self.tracked is None:
            self.tracked = [Tracked(self.game) for _ in range(len(frames))]
        kept, choice, j = [], [], 0
        for frame in frames:  # episodes only end: match each frame to the next tracked episode it follows from
            while j < len(self.tracked) and not self.tracked[j].follow(frame, self.actions):
                j += 1
            if j == len(self.tracked):  # lost track (the game drew on hidden randomness): play no-op
                self.lost += 1
                choice.append(0)
                continue
            t = self.tracked[j]
            j += 1
            self.synced += 1
            t.chosen = self._plan(t.state)
            kept.append(t)
            choice.append(t.chosen)
        self.tracked = kept
        return np.asarray(choice, dtype=np.int64)


def build_policy(config, weights):
    return OwnEmulator(config.get("game") or os.environ.get("REASEARCH_GAME", "qbert"))
