"""Child processes that end when their parent ends, however the parent ends.

A parent that is killed with SIGKILL runs no cleanup, and one whose stdout is a closed pipe may
fail while cleaning up; a child in a session of its own (so that a terminal's Ctrl-C reaches the
parent only, which then stops the children in order) would then run on forever. On Linux the
kernel can signal a child when its parent dies (prctl PR_SET_PDEATHSIG): `die_with_parent` is a
`preexec_fn` that asks for it. Elsewhere it does nothing, and only the parent's own cleanup
stops its children.

Spark's processes need nothing more: the JVM that pyspark starts exits when its stdin (a pipe
from the Python driver) closes, which the kernel does when the driver dies, and pyspark's worker
daemon kills its workers when its own stdin from the JVM closes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


# Looked up once, in the parent: a preexec_fn runs between fork and exec, where loading a
# library (taking the import or dynamic-loader locks another thread may hold) is not safe.
_PRCTL = _load_prctl()


def supported() -> bool:
    return _PRCTL is not None


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> Callable[[], None]:
    """A `subprocess.Popen(preexec_fn=...)`: the child gets `sig` when the process that started
    it ends. SIGKILL by default: it is what a parent's death calls for (an orderly stop is the
    parent's own job while it lives), and a child cannot ignore it or hang in a handler.

    The signal is tied to the parent *thread* that forked: start children from the main thread
    (or a thread that lives as long as they should)."""
    parent = os.getpid()
    prctl = _PRCTL

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        # The parent may have died between fork and prctl: nothing would signal us then.
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


def hangup_as_terminate() -> None:
    """Handle SIGHUP (the terminal closed, `tmux kill-session`) as SIGTERM: whatever the process
    does on SIGTERM at that moment (stop its query, stop its children, or the default: exit)
    happens on a hangup too. Only the main thread may set handlers: elsewhere, nothing."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, lambda *_: signal.raise_signal(signal.SIGTERM))
