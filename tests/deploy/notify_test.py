"""kclawd speaks sd_notify's protocol (systemd's Type=notify, WatchdogSec=):
a test socket at $NOTIFY_SOCKET receives READY=1 once kclawd answers its
own Health, WATCHDOG=1 at half of $WATCHDOG_USEC while it does, none while
it is stopped (SIGSTOP), pings again after SIGCONT, and STOPPING=1 on
SIGTERM. With WATCHDOG_PID naming another process it pings no watchdog."""
import os, signal, socket, subprocess, sys, tempfile, time

B = os.environ["KCLAW_BIN"]


def fail(msg, log):
    sys.stderr.write("FAIL: %s\n%s\n" % (msg, open(log).read()[-2000:]))
    sys.exit(1)


def recv_until(sock, want, timeout, log):
    """The datagrams received until one holds want (within timeout s)."""
    got, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            d = sock.recv(4096).decode()
        except socket.timeout:
            break
        got.append(d)
        if want in d.split("\n"):
            return got
    fail("no %s within %s s (got %r)" % (want, timeout, got), log)


def run(tmp, watchdog_pid):
    home = os.path.join(tmp, "home%d" % watchdog_pid)
    os.makedirs(home)
    path = os.path.join(tmp, "notify%d" % watchdog_pid)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="200000",
               KCLAW_HOME=home)
    env.pop("KCLAW_HTTP_URL", None)
    if watchdog_pid:
        env["WATCHDOG_PID"] = str(watchdog_pid)
    log = os.path.join(tmp, "kclawd%d.log" % watchdog_pid)
    p = subprocess.Popen([os.path.join(B, "kclawd"), "--home", home],
                         cwd=home, env=env, stdout=open(log, "w"),
                         stderr=subprocess.STDOUT)
    try:
        recv_until(sock, "READY=1", 20, log)
        if watchdog_pid:
            sock.settimeout(0.6)
            try:
                d = sock.recv(4096).decode()
                fail("a watchdog ping for another pid: %r" % d, log)
            except socket.timeout:
                pass
        else:
            # Pings every 100 ms: 3 within a few seconds even when loaded.
            for _ in range(3):
                recv_until(sock, "WATCHDOG=1", 5, log)
            p.send_signal(signal.SIGSTOP)
            time.sleep(0.3)
            sock.settimeout(0.05)
            try:  # what was sent before the stop
                while sock.recv(4096):
                    pass
            except socket.timeout:
                pass
            sock.settimeout(0.7)
            try:
                d = sock.recv(4096).decode()
                fail("a ping while kclawd was stopped: %r" % d, log)
            except socket.timeout:
                pass
            p.send_signal(signal.SIGCONT)
            recv_until(sock, "WATCHDOG=1", 5, log)
        p.terminate()
        recv_until(sock, "STOPPING=1", 15, log)
        if p.wait(timeout=15) != 0:
            fail("kclawd exited with %d" % p.returncode, log)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
        sock.close()


def main():
    with tempfile.TemporaryDirectory(prefix="kc-notify-") as tmp:
        run(tmp, 0)
        run(tmp, 1)
    print("notify ok")


main()
