"""Start a private, real ``dockerd`` and build a local busybox image (no registry needed).

Used by the docker-backend tests and available to benchmarks and the demo (../shared/FACTS.md):

    daemon = DockerDaemon.start()          # raises DockerUnavailable with the reason
    image = build_busybox_image(daemon)    # docker import of a busybox-static rootfs
    ...                                    # DOCKER_HOST=daemon.host
    daemon.stop()                          # by pid; removes its directories

``ensure_docker_installed()`` installs ``docker.io`` and ``busybox-static`` with apt-get when the
binaries are missing (root only). The daemon runs with ``--iptables=false --bridge=none``: its
containers use ``--network none``.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
DEFAULT_IMAGE = "loom-busybox:local"


class DockerUnavailable(RuntimeError):
    """dockerd cannot run here; the message says why (tests skip with it)."""


def ensure_docker_installed(*, install: bool = True) -> None:
    """Make sure dockerd, the docker CLI and a static busybox exist (apt-get if allowed)."""
    missing = [b for b in ("dockerd", "docker") if shutil.which(b) is None]
    if not any(Path(p).exists() for p in BUSYBOX_CANDIDATES):
        missing.append("busybox")
    if not missing:
        return
    if not install or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise DockerUnavailable(f"missing {missing} and cannot apt-get install them")
    result = subprocess.run(
        ["apt-get", "install", "-y", "docker.io", "busybox-static"],
        capture_output=True,
        text=True,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise DockerUnavailable(f"apt-get install docker.io failed: {result.stderr[-500:]}")


@dataclass
class DockerDaemon:
    """A dockerd this process started; ``host`` is its ``unix://`` socket URL."""

    pid: int
    base_dir: Path
    socket_path: Path
    process: subprocess.Popen[bytes]

    @property
    def host(self) -> str:
        return f"unix://{self.socket_path}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}

    def docker(self, *args: str, input_bytes: bytes | None = None, timeout: float = 120) -> str:
        """Run the docker CLI against this daemon; raises CalledProcessError on failure."""
        result = subprocess.run(
            ["docker", *args],
            input=input_bytes,
            capture_output=True,
            env=self.env(),
            timeout=timeout,
            check=True,
        )
        return result.stdout.decode().strip()

    @classmethod
    def start(cls, *, timeout_s: float = 30.0, install: bool = True) -> DockerDaemon:
        """Start dockerd with private data/exec roots; returns when it answers ``docker info``."""
        ensure_docker_installed(install=install)
        base = Path(tempfile.gettempdir()) / f"ldk-{uuid.uuid4().hex[:8]}"  # short: socket path
        for sub in ("data", "exec"):
            (base / sub).mkdir(parents=True)
        socket_path = base / "docker.sock"
        log = open(base / "dockerd.log", "wb")  # noqa: SIM115 (lives as long as the daemon)
        process = subprocess.Popen(
            [
                "dockerd",
                "--data-root", str(base / "data"),
                "--exec-root", str(base / "exec"),
                "--pidfile", str(base / "dockerd.pid"),
                "-H", f"unix://{socket_path}",
                "--iptables=false",
                "--ip6tables=false",
                "--bridge=none",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        daemon = cls(process.pid, base, socket_path, process)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = (base / "dockerd.log").read_text(errors="replace")[-800:]
                daemon.stop()
                raise DockerUnavailable(f"dockerd exited with {process.returncode}: {tail}")
            if socket_path.exists():
                try:
                    daemon.docker("info", "--format", "{{.ServerVersion}}", timeout=5)
                    return daemon
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                    pass
            time.sleep(0.2)
        tail = (base / "dockerd.log").read_text(errors="replace")[-800:]
        daemon.stop()
        raise DockerUnavailable(f"dockerd did not answer within {timeout_s:.0f} s: {tail}")

    def stop(self, timeout_s: float = 20.0) -> None:
        """Remove its containers, SIGTERM the daemon by pid (SIGKILL after a while), clean up."""
        if self.process.poll() is None:
            try:
                ids = self.docker("ps", "-aq", timeout=10).split()
                if ids:
                    self.docker("rm", "-f", *ids, timeout=30)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        subprocess.run(["umount", "-R", str(self.base_dir / "data")], capture_output=True)
        shutil.rmtree(self.base_dir, ignore_errors=True)


def busybox_rootfs_tar() -> bytes:
    """A minimal root filesystem: busybox-static plus a symlink per applet, /tmp, /work, and a
    world-writable /var/tmp (what an image needing a writable root would write to)."""
    busybox = next((p for p in BUSYBOX_CANDIDATES if Path(p).exists()), None)
    if busybox is None:
        raise DockerUnavailable("no busybox binary (apt-get install busybox-static)")
    applets = subprocess.run(
        [busybox, "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in (
            "bin",
            "tmp",
            "work",
            "proc",
            "sys",
            "dev",
            "etc",
            "usr",
            "var",
            "var/tmp",
        ):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if directory.endswith("tmp") else 0o755
            tar.addfile(info)
        tar.add(busybox, arcname="bin/busybox")
        for applet in applets:
            if applet == "busybox":
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
        passwd = b"root:x:0:0:root:/root:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    return buffer.getvalue()


def build_busybox_image(daemon: DockerDaemon, tag: str = DEFAULT_IMAGE) -> str:
    """``docker import`` the busybox rootfs as ``tag`` (PATH set to /bin); returns the tag."""
    daemon.docker("import", "--change", "ENV PATH=/bin", "-", tag, input_bytes=busybox_rootfs_tar())
    return tag
