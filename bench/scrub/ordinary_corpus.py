"""Ordinary structured text with no secrets in it: what tools return besides log lines.

The structural scrubber keys on names, so its false positives come from text full of names: JSON job
and task records, environment dumps, configuration excerpts, and error messages that mention tokens,
passwords or authentication without containing one. Every item this corpus yields is a false positive
if the scrubber changes it. Built to contain the near misses a name-based scrubber must leave alone:
``RUCIO_AUTH_TYPE=x509_proxy``, ``BEARER_TOKEN_FILE=/tmp/bt_u1000``, ``"max_tokens": 4096``,
``token_endpoint: https://...``, ``secretName: panda-db``, ``pass: 120``, ``Failed to refresh token:
connection refused``, PanDA's space tokens (``destinationdblocktoken``), AWS tags ``{"Key": "Name",
"Value": ...}``, PanDA job parameters with ``"value"`` fields. Deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
import uuid

_SITES = ["CERN-PROD", "BNL-ATLAS", "TRIUMF", "IN2P3-CC", "FZK-LCG2", "RAL-LCG2", "INFN-T1", "MWT2", "AGLT2"]
_STATUSES = ["running", "finished", "failed", "holding", "transferring", "activated", "starting", "closed"]
_USERS = ["atlas-phys-prod", "prodsys", "atlas-dpd-production", "gangarbt"]
_TRANSFORMS = ["Sim_tf.py", "Reco_tf.py", "Derivation_tf.py", "Gen_tf.py", "HITSMerge_tf.py"]
_PROJECTS = ["mc23_13p6TeV", "mc21_13p6TeV", "data24_13p6TeV", "mc20_13TeV", "valid1"]
_ERRORS = [
    "Failed to refresh token: connection refused by the token endpoint",
    "invalid password: too short for the policy",
    "token: expired",
    "authentication failed for account prodsys: the proxy has expired",
    "OIDC token expired at 2026-11-30T04:12:00Z, requesting a new one",
    "Auth: OK",
    "could not read the token file: No such file or directory",
    "secret not found in namespace panda",
    "password authentication failed for user \"panda\"",
    "the access token does not grant scope storage.read",
    "Key error: 'computingsite' missing from the job record",
    "token refresh succeeded, next refresh in 3000 s",
    "credentials were rejected by the storage element",
    "no api key configured for this queue",
    "tests: pass: 120, fail: 0, skip: 3",
]


def _guid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def _dataset(rng: random.Random) -> str:
    return (f"{rng.choice(_PROJECTS)}.{rng.randint(300000, 999999)}.Py8EG_A14NNPDF23LO_jj_JZ{rng.randint(0, 9)}"
            f".simul.HITS.e{rng.randint(1000, 9999)}_s{rng.randint(1000, 9999)}")


def _job_record(rng: random.Random) -> str:
    record = {
        "pandaid": rng.randint(6_000_000_000, 6_999_999_999),
        "jeditaskid": rng.randint(30_000_000, 45_999_999),
        "jobstatus": rng.choice(_STATUSES),
        "computingsite": rng.choice(_SITES),
        "produsername": rng.choice(_USERS),
        "transformation": rng.choice(_TRANSFORMS),
        "prodsourcelabel": rng.choice(["managed", "user", "test"]),
        "attemptnr": rng.randint(0, 5),
        "maxattempt": rng.randint(3, 10),
        "corecount": rng.choice([1, 8]),
        "piloterrorcode": rng.choice([0, 1099, 1305, 1201]),
        "piloterrordiag": rng.choice(["", "Failed to stage-in file", "Payload exceeded maximum allowed memory"]),
        "destinationdblock": _dataset(rng) + "_sub0" + str(rng.randint(10000000, 99999999)),
        "destinationdblocktoken": rng.choice(["ATLASDATADISK", "ATLASSCRATCHDISK", "NULL"]),
        "dispatchDBlockToken": rng.choice(["ATLASDATADISK", "NULL"]),
        "jobsetid": rng.randint(1, 99999),
        "gshare": rng.choice(["Express", "MC Simulation Full", "Group production"]),
        "resourcetype": rng.choice(["SCORE", "MCORE", "SCORE_HIMEM"]),
        "cpuconsumptiontime": rng.randint(0, 500000),
        "creationtime": f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00",
    }
    return json.dumps(record)


def _task_params(rng: random.Random) -> str:
    params = {
        "taskName": f"{_dataset(rng)}/",
        "userName": rng.choice(_USERS),
        "vo": "atlas",
        "taskPriority": rng.randint(100, 1000),
        "architecture": "x86_64-el9-gcc13-opt",
        "transUses": "Athena-24.0.53",
        "processingType": rng.choice(["simul", "reprocessing", "deriv"]),
        "nEventsPerJob": rng.choice([100, 500, 1000]),
        "jobParameters": [
            {"type": "constant", "value": f"--maxEvents={rng.choice([100, 500, 1000])}"},
            {"type": "template", "param_type": "input", "value": "--inputEVNTFile=${IN}", "dataset": _dataset(rng)},
            {"type": "template", "param_type": "output", "value": "--outputHITSFile=${OUTPUT0}"},
            {"type": "constant", "value": f"--randomSeed=${{SEQNUMBER}} --digiSeedOffset1={rng.randint(1, 99)}"},
        ],
        "tokenizerModel": rng.choice(["bert-base", "minilm"]),
        "max_tokens": rng.choice([1024, 4096]),
        "usage": {"prompt_tokens": rng.randint(10, 5000), "completion_tokens": rng.randint(10, 2000)},
    }
    return json.dumps(params)


def _env_dump(rng: random.Random) -> str:
    uid = rng.randint(1000, 60000)
    env = [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        f"HOME=/home/atlpilot{rng.randint(1, 99)}",
        "ATLAS_LOCAL_ROOT_BASE=/cvmfs/atlas.cern.ch/repo/ATLASLocalRootBase",
        f"X509_USER_PROXY=/tmp/x509up_u{uid}",
        "X509_CERT_DIR=/etc/grid-security/certificates",
        "PANDA_URL_SSL=https://pandaserver.cern.ch:25443/server/panda",
        f"HARVESTER_ID=CERN_central_{rng.choice('ABK')}",
        "RUCIO_ACCOUNT=pilot",
        "RUCIO_AUTH_TYPE=x509_proxy",
        f"BEARER_TOKEN_FILE=/tmp/bt_u{uid}",
        "OIDC_TOKEN_DIR=/var/run/oidc",
        f"PILOT_HOME=/pool/condor/dir_{rng.randint(10000, 99999)}",
        f"SITE_NAME={rng.choice(_SITES)}",
        "LANG=en_US.UTF-8",
        "PASSWORD_FILE=/etc/panda/db.pass",
        "TOKEN_ISSUER=https://atlas-auth.web.cern.ch/",
    ]
    rng.shuffle(env)
    form = rng.randrange(3)
    if form == 0:
        return "\n".join(env)
    if form == 1:
        return json.dumps([{"name": e.split("=", 1)[0], "value": e.split("=", 1)[1]} for e in env])
    return "docker run " + " ".join(f"-e {e}" for e in env[:6]) + " atlas/athena:24.0.53"


def _config(rng: random.Random) -> str:
    lines = [
        "auth:",
        "  auth_type: x509",
        f"  token_lifetime: {rng.choice([3600, 7200])}",
        "  token_endpoint: https://atlas-auth.web.cern.ch/token",
        "  secretName: panda-db",
        "  passphrase_required: false",
        f"  max_tokens: {rng.choice([1024, 4096])}",
        "  password_policy: strict",
        "database:",
        f"  host: dbod-panda{rng.randint(1, 9)}.cern.ch",
        "  user: panda_reader",
        "  password_env: PANDA_DB_PASSWORD",
        "  password: ${PANDA_DB_PASSWORD}",
        "  password_file: /run/secrets/panda-db",
        "keys:",
        f"  key: {rng.choice(['AOD', 'HITS', 'EVNT'])}",
        "  primary_key: pandaid",
    ]
    return "\n".join(lines)


def _aws_tags(rng: random.Random) -> str:
    tags = [{"Key": "Name", "Value": f"panda-worker-{rng.randint(1, 99)}"},
            {"Key": "Project", "Value": "atlas"},
            {"Key": "Owner", "Value": rng.choice(_USERS)}]
    return json.dumps({"Tags": tags, "InstanceId": f"i-{rng.getrandbits(64):016x}"})


def _error(rng: random.Random) -> str:
    return f"tool get_job_log failed: {rng.choice(_ERRORS)} (task {rng.randint(30_000_000, 45_999_999)})"


_KINDS = (_job_record, _task_params, _env_dump, _config, _aws_tags, _error)


def ordinary_items(count: int = 1000, seed: int = 20261130) -> list[str]:
    """``count`` secret-free texts, each a whole tool result or error message."""
    rng = random.Random(seed)
    return [_KINDS[i % len(_KINDS)](rng) for i in range(count)]


def ordinary_values(count: int = 1000, seed: int = 20261130) -> list[object]:
    """The JSON items of ``ordinary_items`` decoded, as tools hand them to ``scrub_value``."""
    out: list[object] = []
    for text in ordinary_items(count, seed):
        try:
            out.append(json.loads(text))
        except json.JSONDecodeError:
            out.append(text)
    return out
