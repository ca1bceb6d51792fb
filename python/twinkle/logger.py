"""twinkle.get_logger() (Twinkle's src/twinkle/utils/logger.py): a logging.Logger named
'twinkle', propagate False, format "[YYYY-MM-DD HH:MM:SS][LEVEL:twinkle] msg" on stderr; level
from env LOG_LEVEL (default INFO) on global rank 0 and ERROR on the other ranks, so one line per
job (as the C++ logger)."""
import logging
import os

from . import _core


class TwinkleLogger(logging.Logger):

    def __init__(self, name):
        super().__init__(name)
        self._once = set()

    def _reset_level(self):
        level = os.environ.get('LOG_LEVEL', 'INFO').upper()
        self.setLevel(level if _core.world_rank() == 0 and level in logging._nameToLevel else
                      logging.INFO if _core.world_rank() == 0 else logging.ERROR)

    def info(self, msg, *args, ranks=None, **kw):
        if ranks == 'all' and not self.isEnabledFor(logging.INFO):
            self.handle(self.makeRecord(self.name, logging.INFO, '', 0, f'[rank{_core.world_rank()}] {msg}', args,
                                        None))
            return
        super().info(msg, *args, **kw)

    def info_once(self, msg, *args, **kw):
        if msg not in self._once:
            self._once.add(msg)
            self.info(msg, *args, **kw)

    def warning_once(self, msg, *args, **kw):
        if msg not in self._once:
            self._once.add(msg)
            self.warning(msg, *args, **kw)

    def info_if(self, msg, cond, *args, **kw):
        if cond:
            self.info(msg, *args, **kw)

    def warning_if(self, msg, cond, *args, **kw):
        if cond:
            self.warning(msg, *args, **kw)


_logger = None


def get_logger():
    global _logger
    if _logger is None:
        _logger = TwinkleLogger('twinkle')
        _logger.propagate = False
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter('[%(asctime)s][%(levelname)s:twinkle] %(message)s',
                                               datefmt='%Y-%m-%d %H:%M:%S'))
        _logger.addHandler(handler)
        _logger._reset_level()
    return _logger
