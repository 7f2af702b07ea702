"""A program on a pseudo-terminal of its own, as a user's terminal runs it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


class Terminal:
    """The wizard on a pseudo-terminal of its own (it is the session leader, the terminal its
    controlling one): what it draws is drained (or it would block), keys are typed into it."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, size=(40, 120)):
        import fcntl
        import pty
        import struct
        import termios
        import threading

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: nothing but exec
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
        self.screen = bytearray()
        self.status: int | None = None
        self._drained = threading.Thread(target=self._drain, daemon=True)
        self._drained.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return
            if not data:
                return
            self.screen.extend(data)

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def hang_up(self) -> None:
        """The terminal window closed: the kernel sends SIGHUP to the wizard."""
        os.close(self.fd)

    def wait_exit(self, timeout: float) -> int | None:
        """The program's exit status (None: still running after ``timeout``). Once it has
        exited, ``screen`` holds everything it wrote: its last lines may still be on their way
        through the terminal when it exits, so the drain is awaited until the terminal's end
        (every holder of it gone), for up to 10 s more where a child of it still holds it."""
        deadline = time.monotonic() + timeout
        while self.status is None and time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
            else:
                time.sleep(0.1)
        if self.status is not None:
            self._drained.join(10)
        return self.status

    def kill(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.wait_exit(10)


def until(predicate, timeout: float, what: str, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(step)
