"""Child processes the testbed starts: tracked by PID, stopped by PID, never by name."""
import os
import signal
import subprocess
import threading
import time


class Proc:
    """One child process with its output captured to a log file."""

    def __init__(self, name, argv, log_path, env=None, netns=None):
        self.name = name
        self.argv = list(argv)
        if netns:
            self.argv = ["ip", "netns", "exec", netns] + self.argv
        self.log_path = log_path
        self._log = open(log_path, "wb")
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        self.popen = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      env=full_env, start_new_session=True)

    @property
    def pid(self):
        return self.popen.pid

    def poll(self):
        return self.popen.poll()

    def alive(self):
        return self.popen.poll() is None

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines=20):
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for_log(self, needle, timeout, what=None):
        """Polls the log for `needle` until `timeout` seconds; returns the matching line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_text().splitlines():
                if needle in line:
                    return line
            if not self.alive():
                raise RuntimeError(f"{self.name} (pid {self.pid}) exited with code "
                                   f"{self.poll()} before {what or needle!r}:\n{self.log_tail()}")
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} (pid {self.pid}): no {what or needle!r} within "
                           f"{timeout}s:\n{self.log_tail()}")

    def stop(self, timeout=5.0, sig=signal.SIGTERM):
        """Signals the process group (ip netns exec + the program), then SIGKILL after timeout."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.popen.wait(timeout=5)
        self._log.close()
        return self.popen.returncode


class ProcSet:
    """All processes of a run; stop_all() on exit, failure or Ctrl-C."""

    def __init__(self):
        self._procs = []
        self._lock = threading.Lock()

    def start(self, *args, **kwargs):
        p = Proc(*args, **kwargs)
        with self._lock:
            self._procs.append(p)
        return p

    def stop_all(self):
        with self._lock:
            procs, self._procs = self._procs, []
        for p in reversed(procs):
            p.stop()

    def __iter__(self):
        with self._lock:
            return iter(list(self._procs))


def run(argv, check=True, netns=None, capture=True, timeout=30):
    """Runs a short command; raises with its output on failure."""
    if netns:
        argv = ["ip", "netns", "exec", netns] + list(argv)
    r = subprocess.run(argv, capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(argv)}\n"
                           f"{(r.stderr or '').strip()}")
    return r
