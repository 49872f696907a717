"""Ordinary PanDA job-log text (pilot, payload and monitor lines) with no secrets in it.

The scrubber's false-positive rate is measured on this corpus: every line it changes is a false
positive. The lines imitate what operators actually paste and tools actually return: pilot log
records, Athena payload output, stage-in/out with checksums and GUIDs, dataset and file names,
site and queue names, batch-system messages and error diagnostics. Deterministic for a given seed.
"""

from __future__ import annotations

import random
import uuid

_SITES = ["CERN-PROD", "BNL-ATLAS", "TRIUMF", "IN2P3-CC", "FZK-LCG2", "RAL-LCG2", "INFN-T1", "NDGF-T1",
          "MWT2", "AGLT2", "SWT2_CPB", "TOKYO-LCG2", "praguelcg2", "DESY-HH", "UKI-NORTHGRID-MAN-HEP"]
_QUEUES = ["CERN-PROD_UCORE", "BNL_PROD_MCORE", "TRIUMF_GPU", "IN2P3-CC_HIMEM", "FZK-LCG2_UCORE",
           "RAL-LCG2_MCORE", "MWT2_UC_UCORE", "AGLT2_SL7", "ANALY_CERN_K8S", "ANALY_BNL_VP"]
_PROJECTS = ["mc23_13p6TeV", "mc21_13p6TeV", "data24_13p6TeV", "mc20_13TeV", "data18_13TeV", "valid1"]
_PHYS = ["Py8EG_A14NNPDF23LO_jj_JZ2", "PhPy8EG_A14_ttbar_hdamp258p75_nonallhad", "Sh_2214_Zmumu_maxHTpTV2_BFilter",
         "MGPy8EG_A14N23LO_SS_direct_1200_1", "PowhegPythia8EvtGen_NNPDF3_AZNLO_ggH125_ZZ4lep",
         "physics_Main", "Sherpa_2211_Wenu_maxHTpTV2_CVetoBVeto", "aMcAtNloPy8EG_MEN30NLO_A14N23LO_ttW"]
_STEPS = ["simul", "recon", "merge", "deriv", "evgen", "digit"]
_FORMATS = ["HITS", "AOD", "DAOD_PHYS", "DAOD_PHYSLITE", "EVNT", "RDO", "ESD", "HIST", "NTUP_PILEUP"]
_RELEASES = ["Athena,24.0.53", "AthDerivation,21.2.178.0", "AthSimulation,23.0.30", "Athena,25.0.12",
             "AthGeneration,23.6.34"]
_TRANSFORMS = ["Sim_tf.py", "Reco_tf.py", "Derivation_tf.py", "Gen_tf.py", "HITSMerge_tf.py", "RDOMerge_tf.py"]
_HOSTS = ["lxbatch{0}.cern.ch", "acas{0}.usatlas.bnl.gov", "wn-{0}.triumf.ca", "ccwsge{0}.in2p3.fr",
          "f01-{0}-e.gridka.de", "lcg{0}.gridpp.rl.ac.uk", "uct2-c{0}.mwt2.org"]
_ERRORS = [
    ("1305", "Failed to execute payload:Non-zero return code from EVNTtoHITS (65)"),
    ("1099", "Failed to stage-in file:Copy command timed out after 3600 s"),
    ("1137", "Put error: Failed to add file to the file catalog"),
    ("1201", "Payload exceeded maximum allowed memory (4000 MB)"),
    ("1213", "Looping job killed by pilot: no output file updates in 7200 s"),
    ("1324", "Service not available at the moment: no space left on device"),
    ("1150", "Pilot has decided to kill looping job"),
    ("1361", "Lost heartbeat: job was not updated in 1800 s"),
    ("65", "TRF_EXEC_FAIL: athena.py failed with exit code 65, see log.RAWtoALL"),
    ("8", "TRF_ATHENA_FAIL: Athena caught signal 11 (Segmentation fault)"),
]
_MODULES = ["pilot.control.job", "pilot.control.payload", "pilot.control.data", "pilot.util.monitoring",
            "pilot.copytool.rucio", "pilot.user.atlas.common", "pilot.util.heartbeat", "pilot.control.monitor"]


def _ts(rng: random.Random) -> str:
    return (f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d},{rng.randint(0, 999):03d}")


def _dataset(rng: random.Random) -> str:
    dsid = rng.randint(300000, 999999)
    tags = "_".join(f"{c}{rng.randint(1000, 9999)}" for c in rng.sample("ersapt", rng.randint(1, 3)))
    return (f"{rng.choice(_PROJECTS)}.{dsid}.{rng.choice(_PHYS)}.{rng.choice(_STEPS)}."
            f"{rng.choice(_FORMATS)}.{tags}")


def _lfn(rng: random.Random) -> str:
    ds = _dataset(rng)
    return f"{ds.rsplit('.', 1)[0]}.{rng.choice(_FORMATS)}.{rng.randint(10000000, 49999999)}._{rng.randint(1, 9999):06d}.pool.root.1"


def _guid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128))).upper() if rng.random() < 0.5 else str(uuid.UUID(int=rng.getrandbits(128)))


def _host(rng: random.Random) -> str:
    return rng.choice(_HOSTS).format(rng.randint(1, 9999))


def _line(rng: random.Random) -> str:
    ts = _ts(rng)
    level = rng.choice(["INFO", "INFO", "INFO", "WARNING", "DEBUG", "ERROR"])
    mod = rng.choice(_MODULES)
    job = rng.randint(6_000_000_000, 6_999_999_999)
    task = rng.randint(30_000_000, 45_999_999)
    kind = rng.randrange(24)
    if kind == 0:
        body = f"job {job} has state=running, task {task}, site {rng.choice(_SITES)}, queue {rng.choice(_QUEUES)}"
    elif kind == 1:
        body = (f"stage-in: lfn={_lfn(rng)} guid={_guid(rng)} scope={rng.choice(_PROJECTS)} "
                f"checksum=ad:{rng.getrandbits(32):08x} filesize={rng.randint(10**6, 6 * 10**9)}")
    elif kind == 2:
        code, diag = rng.choice(_ERRORS)
        body = f"pilotErrorCode={code} pilotErrorDiag=\"{diag}\" jobid={job}"
    elif kind == 3:
        body = (f"executing command: export ATLAS_LOCAL_ROOT_BASE=/cvmfs/atlas.cern.ch/repo/ATLASLocalRootBase;"
                f" source $ATLAS_LOCAL_ROOT_BASE/user/atlasLocalSetup.sh --quiet; asetup {rng.choice(_RELEASES)};"
                f" {rng.choice(_TRANSFORMS)} --inputHITSFile={_lfn(rng)} --maxEvents={rng.choice([100, 500, 1000, 2000])}")
    elif kind == 4:
        body = (f"memory monitor: maxPSS={rng.randint(500000, 4500000)} kB maxRSS={rng.randint(500000, 6000000)} kB "
                f"maxVMEM={rng.randint(2000000, 12000000)} kB avgSwap={rng.randint(0, 20000)} kB")
    elif kind == 5:
        body = f"heartbeat sent for job {job} (attempt {rng.randint(1, 5)}), server replied StatusCode=0"
    elif kind == 6:
        body = (f"rucio upload: dataset {_dataset(rng)}_tid{task}_00 to RSE {rng.choice(_SITES)}_DATADISK "
                f"done in {rng.uniform(1, 900):.1f} s")
    elif kind == 7:
        body = (f"worker node {_host(rng)} cpu model: Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz, "
                f"{rng.choice([8, 16, 32, 64])} cores, cgroup memory limit {rng.choice([2000, 4000, 8000])} MB")
    elif kind == 8:
        body = (f"container image /cvmfs/unpacked.cern.ch/registry.hub.docker.com/atlas/athena:"
                f"{rng.choice(_RELEASES).split(',')[1]}_x86_64-el9 digest sha256:{rng.getrandbits(256):064x}")
    elif kind == 9:
        body = (f"Event {rng.randint(0, 5000)} in run {rng.randint(280000, 480000)} processed by AthenaEventLoopMgr "
                f"[{rng.randint(1, 99)}% done, {rng.uniform(0.1, 30):.2f} s/event]")
    elif kind == 10:
        body = (f"jobParameters: --AMIConfig={rng.choice('rsapt')}{rng.randint(1000, 9999)} --outputAODFile=AOD."
                f"{task}._{rng.randint(1, 9999):06d}.pool.root.1 --jobNumber={rng.randint(1, 9999)} "
                f"--digiSeedOffset1={rng.randint(1, 999)} --randomSeed={rng.randint(1, 10**6)}")
    elif kind == 11:
        body = (f"harvester worker {rng.randint(10**8, 10**9)} submitted to {rng.choice(['HTCondor', 'Slurm', 'k8s'])}"
                f" batchID={rng.randint(10**6, 10**8)}.0 computingElement=ce{rng.randint(1, 20):02d}."
                f"{rng.choice(['cern.ch', 'bnl.gov', 'gridka.de'])}")
    elif kind == 12:
        body = f"proxy lifetime remaining: {rng.randint(1, 96)} h, VOMS attributes /atlas/Role=production/Capability=NULL"
    elif kind == 13:
        body = (f"URL https://bigpanda.cern.ch/job?pandaid={job} task https://bigpanda.cern.ch/task/{task}/ "
                f"logs https://{rng.choice(_SITES).lower()}.cern.ch/logs/{task}/{job}/pilotlog.txt")
    elif kind == 14:
        body = (f"Traceback (most recent call last): File \"/cvmfs/atlas.cern.ch/repo/sw/software/24.0/Athena/"
                f"{rng.choice(_RELEASES).split(',')[1]}/InstallArea/x86_64-el9-gcc13-opt/python/PyJobTransforms/"
                f"trfExe.py\", line {rng.randint(100, 2000)}, in execute")
    elif kind == 15:
        body = (f"ERROR ({rng.choice(['G4Exception', 'ToolSvc.InDetTrackSelectorTool', 'THistSvc'])}): "
                f"issued by : G4ParticleChange::CheckIt, momentum direction is not unit vector, event "
                f"{rng.randint(1, 5000)}")
    elif kind == 16:
        body = (f"file {_lfn(rng)} adler32 {rng.getrandbits(32):08x} md5 {rng.getrandbits(128):032x} "
                f"size {rng.randint(10**5, 5 * 10**9)} transferred by xrdcp in {rng.uniform(1, 600):.2f} s")
    elif kind == 17:
        body = (f"job {job}: state transition starting -> running -> holding -> {rng.choice(['finished', 'failed'])}"
                f" (attemptNr={rng.randint(0, 4)}, maxAttempt={rng.randint(3, 10)})")
    elif kind == 18:
        body = (f"conditions: global tag OFLCOND-MC23-SDR-RUN3-{rng.randint(1, 9):02d}, geometry ATLAS-R3S-2021-03-02-00,"
                f" DBRelease current, IOV [{rng.randint(280000, 480000)},0]-[{rng.randint(480000, 500000)},0]")
    elif kind == 19:
        body = (f"Executing 'xrdcp -f -N root://eosatlas.cern.ch//eos/atlas/atlasdatadisk/rucio/"
                f"{rng.choice(_PROJECTS)}/{rng.getrandbits(8):02x}/{rng.getrandbits(8):02x}/{_lfn(rng)} ./'")
    elif kind == 20:
        body = (f"session id {_guid(rng)}, panda server pandaserver{rng.randint(1, 9):02d}.cern.ch:25443, "
                f"harvester id CERN_central_{rng.choice('ABK')}")
    elif kind == 21:
        body = (f"Athena INFO Time to initialize: {rng.uniform(10, 400):.1f} s, CPU: {rng.uniform(5, 300):.1f} s, "
                f"PMonSD [---] vmem={rng.randint(1000, 4000)} MB malloc={rng.randint(100, 2000)} MB")
    elif kind == 22:
        body = (f"task {task} status={rng.choice(['running', 'exhausted', 'broken', 'finished'])} "
                f"nFilesFailed={rng.randint(0, 500)} gshare={rng.choice(['Express', 'MC Simulation Full', 'Group production'])}"
                f" requestID={rng.randint(40000, 60000)} username={rng.choice(['atlas-phys-prod', 'prodsys'])}")
    else:
        body = (f"Exception caught: RucioException: Details: An unknown exception occurred. "
                f"Cannot authenticate to account prodsys at https://rucio-lb-prod.cern.ch (attempt {rng.randint(1, 3)})")
    return f"{ts} | {level:<8}| {mod:<28}| {body}"


def job_log_lines(count: int = 5000, seed: int = 20261130) -> list[str]:
    rng = random.Random(seed)
    return [_line(rng) for _ in range(count)]
