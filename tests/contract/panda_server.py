"""Start the real PanDA server (1.0.4) for the contract tier: free ports, a temporary directory, teardown.

The recipe lives outside the repository, in ``<repo>/../shared/panda-server`` (override with
``BAMBOO_PANDA_SERVER_RECIPE``): the PostgreSQL schema PyPI does not ship, the seed data, the list of
what the server really imports, and the small WSGI runner that stands in for Apache. This module runs
that recipe step by step, the way its ``setup_and_run.sh`` does, with three differences that make it
usable from a test session:

* the ~700 MB virtualenv is built once per requirements file and Python version and kept under
  ``~/.cache/bamboo-panda-server/`` (``BAMBOO_PANDA_SERVER_CACHE``), so a warm run only starts
  Postgres and the server; a lock file keeps two sessions from building it at the same time;
* ports are free ones and every file but the venv is in a temporary directory removed at teardown;
* the processes it starts are stopped by their pid at teardown, never by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bamboo.devstack.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
RECIPE_ENV = "BAMBOO_PANDA_SERVER_RECIPE"
CACHE_ENV = "BAMBOO_PANDA_SERVER_CACHE"
RECIPE_FILES = ("requirements.txt", "run_server.py", "seed.sql", "default_partitions.sql", "schema/version")
SCHEMA_COMPONENTS = ("PANDA", "PANDAMETA", "PANDAARCH", "PANDABIGMON", "DEFT")
SCHEMA_KINDS = ("TABLE", "VIEW", "SEQUENCE", "FUNCTION", "TRIGGER", "PROCEDURE")
TEST_DN = "/DC=ch/DC=cern/OU=Users/CN=bamboo tester"
TEST_USER = "bamboo tester"
STARTUP_TIMEOUT_S = 180.0
PIP_TIMEOUT_S = 1800.0


class RecipeMissing(RuntimeError):
    """The shared recipe folder is not on this machine (the tier is then skipped, saying this)."""


class ServerStartError(RuntimeError):
    """The recipe is here but a step failed; the message names the step and the log to read."""


def recipe_dir() -> Path:
    """Where the recipe is: the override if set, else beside the repository."""
    override = os.environ.get(RECIPE_ENV)
    return Path(override).expanduser().resolve() if override else (ROOT.parent / "shared" / "panda-server").resolve()


def check_recipe(recipe: Path) -> None:
    missing = [name for name in RECIPE_FILES if not (recipe / name).is_file()]
    if missing:
        raise RecipeMissing(
            f"the real PanDA server recipe is not at {recipe} (missing {', '.join(missing)}); "
            f"set {RECIPE_ENV} to the folder that has setup_and_run.sh, schema/ and seed.sql")


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "bamboo-panda-server").expanduser()


def venv_key(recipe: Path) -> str:
    """Same requirements on the same Python give the same venv; anything else builds a new one."""
    digest = hashlib.sha256((recipe / "requirements.txt").read_bytes())
    digest.update(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    return digest.hexdigest()[:16]


@dataclass
class VenvReport:
    path: Path
    built: bool
    seconds: float


def server_venv(recipe: Path, *, log: Path | None = None) -> VenvReport:
    """The cached venv for this recipe, built under a lock if it is not complete yet."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / f"venv-{venv_key(recipe)}"
    marker = venv / ".bamboo-complete"
    started = time.monotonic()
    if marker.is_file():
        return VenvReport(venv, False, 0.0)
    with open(root / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building it: wait, then reuse
        if marker.is_file():
            return VenvReport(venv, False, time.monotonic() - started)
        shutil.rmtree(venv, ignore_errors=True)  # a build that died half way
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            _run([_base_python(), "-m", "venv", str(venv)], "create the server venv", out)
            _run([str(venv / "bin" / "pip"), "install", "-q", "-r", str(recipe / "requirements.txt")],
                 "pip install the server's requirements", out, timeout=PIP_TIMEOUT_S)
        finally:
            if log:
                out.close()
        marker.write_text(json.dumps({"requirements": str(recipe / "requirements.txt"), "built": time.time()}))
    return VenvReport(venv, True, time.monotonic() - started)


def _base_python() -> str:
    """The interpreter behind the project venv: a venv made from inside a venv would chain to it."""
    return getattr(sys, "_base_executable", None) or sys.executable


def _run(cmd: list[str], step: str, out, *, timeout: float = 300.0, **kwargs) -> None:
    try:
        subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=timeout, **kwargs)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        raise ServerStartError(f"could not {step}: {exc}") from exc


@dataclass
class RealPandaServer:
    """A running real PanDA server and its Postgres; ``url`` is what PANDA_URL / PANDA_URL_SSL take."""

    recipe: Path
    venv: Path
    workdir: Path
    http_port: int
    pg_port: int
    oidc: dict | None = None  # the auth config of a token issuer; None leaves token auth off
    vo: str = "atlas"
    timings: dict[str, float] = field(default_factory=dict)
    _server: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api/v1"

    @property
    def url(self) -> str:
        return f"{self.base_url}/server/panda"

    @property
    def pg_bin(self) -> Path:
        """The project's own pgserver binaries (the same PostgreSQL 16 the recipe pins): unlike the cached
        venv under a home directory, ``nobody`` can execute them."""
        from pgserver._commands import POSTGRES_BIN_PATH

        return Path(POSTGRES_BIN_PATH)

    @property
    def log_dir(self) -> Path:
        return self.workdir / "home" / "log"

    def client_env(self) -> dict[str, str]:
        """What the official client needs to talk to this server (as the recipe's smoke call sets it)."""
        return {"PANDA_URL": self.url, "PANDA_URL_SSL": self.url, "PANDACACHE_URL": self.url,
                "PANDA_BEHIND_REAL_LB": "1", "PANDA_HOME": str(self.workdir / "home")}

    # --- Postgres ------------------------------------------------------------------------------

    def _as_postgres_user(self) -> dict:
        """Postgres refuses to run as root: like the recipe, run it as ``nobody`` there."""
        if os.geteuid() != 0:
            return {}
        return {"user": "nobody", "group": "nogroup", "extra_groups": []}

    def psql(self, sql: str, *, user: str = "panda", database: str = "panda_db") -> str:
        """Run SQL with psql against the server's database and return the unaligned output."""
        result = subprocess.run(
            [str(self.pg_bin / "psql"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", user, "-d", database,
             "-v", "ON_ERROR_STOP=1", "-q", "-A", "-t", "-c", sql],
            capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise ServerStartError(f"psql failed: {result.stderr.strip()}")
        return result.stdout.strip()

    def _psql_file(self, path: Path, *, user: str = "postgres", database: str = "panda_db", out) -> None:
        _run([str(self.pg_bin / "psql"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", user, "-d", database,
              "-v", "ON_ERROR_STOP=1", "-q", "-f", str(path)], f"load {path.name}", out)

    def _start_postgres(self, out) -> None:
        pg = self.workdir / "pg"
        pg.mkdir()
        if os.geteuid() == 0:
            shutil.chown(pg, "nobody", "nogroup")
        as_pg = self._as_postgres_user()
        _run([str(self.pg_bin / "initdb"), "-D", str(pg / "db"), "-U", "postgres", "-A", "trust", "-E", "UTF8"],
             "initdb", out, **as_pg)
        _run([str(self.pg_bin / "pg_ctl"), "-D", str(pg / "db"), "-l", str(pg / "pg.log"), "-o",
              f"-c listen_addresses=127.0.0.1 -p {self.pg_port} -k {pg}", "-w", "start"], "start Postgres", out, **as_pg)

    def _load_schema(self, out) -> None:
        schema = self.recipe / "schema"
        for sql in ("CREATE USER panda PASSWORD 'pandapw'", "CREATE DATABASE panda_db OWNER panda",
                    "ALTER ROLE panda SET search_path = doma_panda,public"):
            self.psql(sql, user="postgres", database="postgres")
        for component in SCHEMA_COMPONENTS:
            for kind in SCHEMA_KINDS:
                path = schema / f"pg_{component}_{kind}.sql"
                if path.is_file():
                    self._psql_file(path, out=out)
        major, minor, patch = (schema / "version").read_text().strip().split(".")
        self.psql("INSERT INTO doma_panda.pandadb_version (component,major,minor,patch) "
                  f"VALUES ('PanDA','{major}','{minor}','{patch}')", user="postgres")
        self._psql_file(schema / "post_step_panda.sql", out=out)
        self._psql_file(self.recipe / "default_partitions.sql", out=out)
        self._psql_file(self.recipe / "seed.sql", user="panda", out=out)

    def _stop_postgres(self) -> None:
        db = self.workdir / "pg" / "db"
        if (db / "postmaster.pid").is_file():
            subprocess.run([str(self.pg_bin / "pg_ctl"), "-D", str(db), "-m", "fast", "-w", "-t", "60", "stop"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                           **self._as_postgres_user())

    # --- the server ------------------------------------------------------------------------------

    def _write_config(self) -> None:
        home = self.workdir / "home"
        for sub in ("etc/panda", "log", "cache", "auth"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        (home / "etc/panda/panda_common.cfg").write_text(
            "[logger]\nloghost=127.0.0.1\nmonport-apache=9\nmethod=GET\nencoding=url\n"
            f"monurlprefix=/logger/logger/query\nlogdir={home / 'log'}\nlog_level=INFO\n")
        settings = {
            "logdir": home / "log", "cache_dir": home / "cache", "backend": "postgres", "dbhost": "127.0.0.1",
            "dbport": self.pg_port, "dbuser": "panda", "dbpasswd": "pandapw", "dbname": "panda_db",
            "nDBConnection": 1, "usedbtimeout": "True", "dbtimeout": 60, "schemaPANDA": "DOMA_PANDA",
            "schemaMETA": "DOMA_PANDAMETA", "schemaPANDAARCH": "DOMA_PANDAARCH", "schemaJEDI": "DOMA_PANDA",
            "schemaDEFT": "DOMA_DEFT", "pserverhost": "127.0.0.1", "pserverhosthttp": "127.0.0.1",
            "pserverporthttp": self.http_port, "useJEDI": "True", "entryVerbose": "False", "loggername": "test",
            "home_dir_cwd": home,
            "adder_plugins": "local:dataservice.AdderDummyPlugin:AdderDummyPlugin",
            "setupper_plugins": "local:dataservice.SetupperDummyPlugin:SetupperDummyPlugin",
            "token_authType": "oidc" if self.oidc else "None", "auth_config": f"{home / 'auth'}/",
            "legacy_token_issuers": "None",
        }
        if self.oidc:  # the server reads <vo>_auth_config.json files from auth_config at start
            (home / "auth" / f"{self.vo}_auth_config.json").write_text(json.dumps(self.oidc))
        body = "".join(f"{k}={v}\n" for k, v in settings.items())
        (home / "etc/panda/panda_server.cfg").write_text(f"[server]\n{body}[daemon]\nenable=False\n")

    def _start_server(self) -> None:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PANDA", "BAMBOO_"))}, **self.client_env()}
        env.pop("PYTHONPATH", None)
        out = open(self.workdir / "server.out", "ab")
        self._server = subprocess.Popen(
            [str(self.venv / "bin" / "python"), str(self.recipe / "run_server.py"), str(self.http_port)],
            cwd=self.workdir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._server.poll() is not None:
                raise ServerStartError(f"the PanDA server exited with {self._server.returncode}; "
                                       f"see {self.workdir / 'server.out'}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                with urllib.request.urlopen(f"{self.api_url}/system/is_alive", timeout=2) as reply:
                    if reply.status == 200:
                        return
            time.sleep(0.3)
        raise ServerStartError(f"the PanDA server did not answer within {STARTUP_TIMEOUT_S:.0f} s; "
                               f"see {self.workdir / 'server.out'}")

    def _stop_server(self) -> None:
        proc = self._server
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):  # its own process group: the server and what it forked
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> "RealPandaServer":
        steps = open(self.workdir / "setup.log", "ab")
        try:
            t0 = time.monotonic()
            self._start_postgres(steps)
            self._load_schema(steps)
            t1 = time.monotonic()
            self._write_config()
            self._start_server()
            t2 = time.monotonic()
        except BaseException:
            steps.close()
            self.stop()
            raise
        steps.close()
        self.timings.update({"postgres_schema_seed_s": t1 - t0, "server_start_s": t2 - t1})
        return self

    def stop(self) -> None:
        self._stop_server()
        self._stop_postgres()

    SEEDED_TABLES = ("jedi_tasks", "jedi_taskparams", "jedi_jobparams_template", "jedi_datasets",
                     "jedi_dataset_contents", "jobsarchived4", "jobsactive4", "jobsdefined4", "jobswaiting4",
                     "jobparamstable", "filestable4", "metatable")

    def reseed(self) -> None:
        """Back to the seed data, with no registered commands, so each contract test starts alike.

        DELETE, not TRUNCATE: the server's one database connection can sit idle inside a transaction after
        a read (a refused kill ends that way), holding a lock TRUNCATE would wait on forever; the lock
        timeout turns any other wait into an error instead of a hung test."""
        deletes = "; ".join(f"DELETE FROM doma_panda.{t}" for t in self.SEEDED_TABLES)
        self.psql(f"SET lock_timeout = '30s'; {deletes}; DELETE FROM doma_deft.prodsys_comm")
        result = subprocess.run(
            [str(self.pg_bin / "psql"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "panda", "-d", "panda_db",
             "-v", "ON_ERROR_STOP=1", "-q", "-f", str(self.recipe / "seed.sql")], capture_output=True, text=True,
            timeout=60)
        if result.returncode != 0:
            raise ServerStartError(f"could not reseed the PanDA database: {result.stderr.strip()}")

    def commands(self, task_id: int | None = None) -> list[tuple[int, str]]:
        """The commands JEDI would pick up (``DEFT.PRODSYS_COMM``): what kill and retry really register."""
        where = f" WHERE comm_task = {int(task_id)}" if task_id is not None else ""
        rows = self.psql(f"SELECT comm_task, comm_cmd FROM doma_deft.prodsys_comm{where} ORDER BY comm_ts")
        return [(int(t), c) for t, c in (line.split("|", 1) for line in rows.splitlines() if line)]


@contextlib.contextmanager
def running_real_server(recipe: Path | None = None, *, oidc: dict | None = None, keep: bool = False):
    """Build (or reuse) the venv, start Postgres and the server, yield it, stop both, remove the files."""
    recipe = recipe or recipe_dir()
    check_recipe(recipe)
    workdir = Path(tempfile.mkdtemp(prefix="bamboo-panda-server-"))
    workdir.chmod(0o755)  # Postgres runs as nobody under it when we are root
    try:
        t0 = time.monotonic()
        venv = server_venv(recipe, log=workdir / "venv.log")
        server = RealPandaServer(recipe, venv.path, workdir, http_port=free_port(), pg_port=free_port(), oidc=oidc)
        server.timings.update({"venv_s": time.monotonic() - t0, "venv_built": float(venv.built)})
        server.start()
        server.timings["total_s"] = time.monotonic() - t0
        try:
            yield server
        finally:
            server.stop()
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":  # `python -m tests.contract.panda_server`: start one and keep it until Ctrl-C
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with running_real_server() as srv:
        print(json.dumps({"url": srv.url, "api": srv.api_url, "pg_port": srv.pg_port, "workdir": str(srv.workdir),
                          "timings": srv.timings}), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
