"""Deterministic classification of a PanDA task ``errorDialog`` into a CamelCase symptom category.

Why deterministic: the Symptom node is the hub the knowledge graph ranks causes through. If the same
dialog could land on two different names (as happens when an LLM names it), frequencies split and
ranking degrades. A fixed, ordered rule table gives the same answer for the same text forever, and
the answer can be tested against every sample incident.

The rules run in this order; the first hit wins:

1. ``reason=<Word>`` token. JEDI and operators put a machine-readable reason into some dialogs; it
   is the most explicit statement of intent available. A known alias maps to its category; an
   unknown word is kept verbatim (CamelCased) rather than guessed at.
2. A *specific* pilot error code (``pilot:1212``, ``pilotErrorCode=1212``, ``pilot error 1212``).
   The pilot already diagnosed the job; its code outranks our reading of the prose.
3. Phrase rules, most specific first (a stage-out checksum mismatch must not read as "corrupted
   input", a brokerage message mentioning memory must not read as an out-of-memory payload).
4. A *generic* pilot error code (1008, 1305, 1220, ...) whose prose said nothing more specific.
5. Fallback ``Unclassified<FirstMeaningfulWords>`` so that an unknown dialog still yields a stable,
   mergeable symptom instead of being dropped.

HTML (the monitor's ``<a href=...>`` log links) and entities are stripped before any rule runs.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

# Confidence reflects how explicit the evidence was, not a probability estimate.
_CONF_REASON_KNOWN = 0.95
_CONF_PILOT_SPECIFIC = 0.9
_CONF_PHRASE = 0.8
_CONF_REASON_VERBATIM = 0.7
_CONF_PILOT_GENERIC = 0.6
_CONF_FALLBACK = 0.2


class ErrorClass(BaseModel):
    """The classifier's verdict for one errorDialog."""

    model_config = ConfigDict(frozen=True)

    category: str = Field(description="CamelCase symptom category, e.g. 'InsufficientMemory'")
    matched_rule: str = Field(description="Which rule decided: 'reason:<alias>', 'pilot:<code>', 'phrase:<name>' or 'fallback'")
    pilot_error_code: int | None = None
    confidence: float = Field(ge=0.0, le=1.0)
    plain_text: str = Field(default="", description="The dialog with HTML removed and whitespace collapsed")


@dataclass(frozen=True)
class _PilotCode:
    category: str
    # Generic codes only say "the payload failed"; prose rules get a chance to be more precise.
    generic: bool = False


# Pilot error codes (numbering as published by the PanDA pilot) grouped into symptom categories.
PILOT_ERROR_CATEGORIES: dict[int, _PilotCode] = {
    # memory
    1212: _PilotCode("InsufficientMemory"),
    1235: _PilotCode("InsufficientMemory"),
    1223: _PilotCode("InsufficientMemory"),
    # time
    1213: _PilotCode("WalltimeExceeded"),
    1204: _PilotCode("WalltimeExceeded"),
    1150: _PilotCode("LoopingJob"),
    # input data
    1100: _PilotCode("InputFileLost"),
    1326: _PilotCode("InputFileLost"),
    1331: _PilotCode("InputFileLost"),
    1145: _PilotCode("InputFileCorrupted"),
    1171: _PilotCode("InputFileCorrupted"),
    1099: _PilotCode("StageInFailure"),
    1151: _PilotCode("StageInFailure"),
    1180: _PilotCode("StageInFailure"),
    1327: _PilotCode("StageInFailure"),
    1361: _PilotCode("StageInFailure"),
    1362: _PilotCode("StageInFailure"),
    1368: _PilotCode("StageInFailure"),
    # output data
    1137: _PilotCode("StageOutFailure"),
    1152: _PilotCode("StageOutFailure"),
    1181: _PilotCode("StageOutFailure"),
    1141: _PilotCode("StageOutFailure"),
    1172: _PilotCode("StageOutFailure"),
    1133: _PilotCode("StageOutFailure"),
    1313: _PilotCode("StageOutFailure"),
    1329: _PilotCode("StageOutFailure"),
    # software / containers
    1186: _PilotCode("SoftwareReleaseMissing"),
    1211: _PilotCode("SoftwareReleaseMissing"),
    1244: _PilotCode("SoftwareReleaseMissing"),
    1346: _PilotCode("SoftwareReleaseMissing"),
    1358: _PilotCode("SoftwareReleaseMissing"),
    1377: _PilotCode("CvmfsUnavailable"),
    1306: _PilotCode("ContainerFailure"),
    1307: _PilotCode("ContainerFailure"),
    1308: _PilotCode("ContainerFailure"),
    1309: _PilotCode("ContainerFailure"),
    1340: _PilotCode("ContainerFailure"),
    1345: _PilotCode("ContainerFailure"),
    1348: _PilotCode("ContainerFailure"),
    1360: _PilotCode("ContainerFailure"),
    1384: _PilotCode("ContainerFailure"),
    # payload crashes
    1203: _PilotCode("PayloadSegfault"),
    1206: _PilotCode("PayloadSegfault"),
    1328: _PilotCode("PayloadSegfault"),
    1355: _PilotCode("PayloadSegfault"),
    1310: _PilotCode("PayloadException"),
    1349: _PilotCode("PayloadException"),
    1246: _PilotCode("UserSandboxMissing"),
    1335: _PilotCode("UserSandboxMissing"),
    # credentials
    1163: _PilotCode("AuthenticationExpired"),
    1177: _PilotCode("AuthenticationExpired"),
    1338: _PilotCode("AuthenticationExpired"),
    1373: _PilotCode("AuthenticationExpired"),
    1382: _PilotCode("AuthenticationExpired"),
    1383: _PilotCode("AuthenticationExpired"),
    # disk
    1098: _PilotCode("DiskSpaceExceeded"),
    1104: _PilotCode("DiskSpaceExceeded"),
    1106: _PilotCode("DiskSpaceExceeded"),
    1124: _PilotCode("DiskSpaceExceeded"),
    1168: _PilotCode("DiskSpaceExceeded"),
    1333: _PilotCode("DiskSpaceExceeded"),
    # site / services
    1116: _PilotCode("SiteMisconfiguration"),
    1117: _PilotCode("SiteMisconfiguration"),
    1341: _PilotCode("SiteMisconfiguration"),
    1359: _PilotCode("SiteUnavailable"),
    1386: _PilotCode("SiteUnavailable"),
    1316: _PilotCode("ServiceUnavailable"),
    1318: _PilotCode("ServiceUnavailable"),
    1324: _PilotCode("ServiceUnavailable"),
    1369: _PilotCode("ConditionsAccessFailure"),
    1144: _PilotCode("JobKilledByServer"),
    # generic: the prose decides when it can
    1008: _PilotCode("PilotGeneralError", generic=True),
    1220: _PilotCode("PayloadExecutionFailure", generic=True),
    1301: _PilotCode("PilotGeneralError", generic=True),
    1305: _PilotCode("PayloadExecutionFailure", generic=True),
    1315: _PilotCode("PayloadExecutionFailure", generic=True),
    1319: _PilotCode("PilotGeneralError", generic=True),
    1351: _PilotCode("PayloadExecutionFailure", generic=True),
}

# Words a ``reason=`` token may carry, lower-cased, mapped to a category.
REASON_ALIASES: dict[str, str] = {
    "insufficientmemory": "InsufficientMemory",
    "outofmemory": "InsufficientMemory",
    "memoryexceeded": "InsufficientMemory",
    "memory": "InsufficientMemory",
    "walltimeexceeded": "WalltimeExceeded",
    "walltime": "WalltimeExceeded",
    "timelimit": "WalltimeExceeded",
    "lostfile": "InputFileLost",
    "inputlost": "InputFileLost",
    "missinginput": "InputFileLost",
    "corruptedfile": "InputFileCorrupted",
    "nosite": "BrokerageNoSite",
    "nocandidates": "BrokerageNoSite",
    "brokerage": "BrokerageNoSite",
    "stageout": "StageOutFailure",
    "stagein": "StageInFailure",
    "softwaremissing": "SoftwareReleaseMissing",
    "releasemissing": "SoftwareReleaseMissing",
    "segfault": "PayloadSegfault",
    "proxyexpired": "AuthenticationExpired",
    "tokenexpired": "AuthenticationExpired",
    "diskfull": "DiskSpaceExceeded",
    "diskspace": "DiskSpaceExceeded",
    "toomanyfiles": "TooManyFilesPerJob",
    "sitedowntime": "SiteUnavailable",
    "downtime": "SiteUnavailable",
}


@dataclass(frozen=True)
class _PhraseRule:
    name: str
    category: str
    pattern: re.Pattern[str]


def _rule(name: str, category: str, regex: str) -> _PhraseRule:
    return _PhraseRule(name, category, re.compile(regex, re.IGNORECASE))


# Order matters: specific before general (see module docstring).
PHRASE_RULES: tuple[_PhraseRule, ...] = (
    # Brokerage messages mention memory/cores/sites, so they must be caught before those rules.
    _rule("brokerage", "BrokerageNoSite",
          r"no (?:candidate|available|eligible) sites?|(?:\b0|zero) candidates?|no candidates? (?:remained|left|available)"
          r"|brokerage (?:failed|could not|found no)|all (?:candidate )?sites (?:were |are )?(?:excluded|skipped)"
          r"|no site (?:can|could|satisfies|has|with)"),
    _rule("too_many_files", "TooManyFilesPerJob",
          r"too many (?:input )?files|number of (?:input )?files (?:per job )?exceeds|nfilesperjob.{0,40}(?:exceed|too large|limit)"
          r"|files per job.{0,30}(?:exceed|limit)|exceeds? the (?:maximum|limit) of \d+ files"),
    _rule("auth_expired", "AuthenticationExpired",
          r"proxy (?:has )?expired|expired (?:grid |voms |user )?proxy|certificate has expired|token (?:has )?expired"
          r"|expired (?:oidc |access |id )?token|no valid (?:voms )?proxy|voms proxy not valid|grid proxy not valid"
          r"|authentication fail|permission denied.{0,40}(?:token|proxy|credential)|x509.{0,30}expired"),
    # An output too large for the job's disk is a disk-space fault whatever stage reported it: "failed at
    # stage-out: Output file too large" and "failed: Output file too large" are one failure.
    _rule("output_too_large", "DiskSpaceExceeded",
          r"output files? (?:is |are |was |were )?too (?:large|big)|outdiskcount"),
    _rule("stage_out", "StageOutFailure",
          r"stage[- ]?out|failed to (?:transfer|upload|copy) (?:the )?output|\bput error|quota exceeded.{0,40}(?:rse|scope|storage)"
          r"|md5sum mismatch on output|adler32 mismatch on output|destination (?:rse|endpoint) (?:unavailable|blacklisted|full)"),
    _rule("input_corrupted", "InputFileCorrupted",
          r"(?:adler32|md5sum|checksum) mismatch(?: on input)?|corrupt(?:ed)? (?:input )?file|file (?:is )?corrupt"
          r"|truncated (?:input )?file|tfile::init.{0,80}(?:not a root file|truncated|corrupt)|failed to read basket"),
    _rule("input_lost", "InputFileLost",
          r"lost (?:input )?files?|input files? (?:is |are |was |were )?(?:lost|missing|not found)|missing input"
          r"|no replicas?(?: were)? found|replica not found|file not found in (?:rucio|storage|ddm)|declared (?:as )?(?:lost|bad)"
          r"|unavailable input|no such file or directory.{0,40}(?:input|root://|davs://)"),
    _rule("stage_in", "StageInFailure",
          r"stage[- ]?in|failed to (?:transfer|download|copy) (?:the )?input|\bget error|xrdcp (?:was unable|failed)"),
    _rule("disk_space", "DiskSpaceExceeded",
          r"no space left on device|disk space|not enough (?:local |scratch )?space|work(?:ing)? ?dir(?:ectory)? (?:is )?too large"
          r"|exceeded (?:the )?(?:disk|scratch|workdir)|output files? too large|outdiskcount|stdout (?:file )?too big"),
    _rule("memory", "InsufficientMemory",
          r"out of memory|\boom\b|oom[- ]?kill|exceeded (?:the )?(?:maximum allowed |max(?:imum)? )?memory|memory limit"
          r"|maxpss.{0,40}(?:exceed|above|limit)|std::bad_alloc|bad_alloc|cannot allocate memory|rss .{0,40}exceed"
          r"|killed .{0,40}memory|memory (?:leak|exceeded)"),
    _rule("walltime", "WalltimeExceeded",
          r"wall ?time|wall-?clock|time ?limit|reached (?:the )?(?:batch system )?(?:max(?:imum)? )?time|sigxcpu"
          r"|exceeded (?:the )?max(?:imum)? (?:run ?)?time|cpu time (?:limit|exceeded)"),
    _rule("looping", "LoopingJob", r"looping job|no output (?:file )?(?:update|modification) for"),
    _rule("segfault", "PayloadSegfault",
          r"segmentation (?:fault|violation)|sigsegv|segfault|core dump|sigbus|\*\*\* break \*\*\*"),
    _rule("container", "ContainerFailure",
          r"singularity|apptainer|container image .{0,40}(?:not found|fail|cannot)|failed to (?:pull|mount) (?:the )?(?:container )?image"
          r"|\bimage (?:was )?not found|no such image|unable to (?:find|locate) (?:the )?image"),
    _rule("release_missing", "SoftwareReleaseMissing",
          r"release .{0,60}(?:not (?:found|available|installed)|missing)|(?:not (?:found|available|installed)|missing) .{0,30}on cvmfs"
          r"|no release candidates|asetup.{0,60}(?:failed|not found|unknown)|software directory does not exist|missing installation"
          r"|transform not found|cmtconfig .{0,40}not (?:found|supported)"),
    _rule("cvmfs", "CvmfsUnavailable", r"cvmfs (?:is )?not (?:responding|alive|mounted)|cvmfs.{0,20}(?:unavailable|stale)"),
    _rule("site_unavailable", "SiteUnavailable",
          r"downtime|queue (?:is )?(?:offline|not online|not active|brokeroff|test mode)|site (?:is )?(?:offline|blacklisted|excluded|unavailable)"
          r"|panda queue (?:is )?not (?:active|online)"),
    _rule("site_misconfig", "SiteMisconfiguration",
          r"bad queue configuration|queuedata|misconfigur|wrong (?:storage|queue) (?:configuration|setting)|ce (?:misconfigured|rejected)"),
    _rule("service", "ServiceUnavailable", r"service (?:is )?(?:not |un)available|rucio server .{0,30}(?:unavailable|timeout)|failed to communicate with server"),
    _rule("conditions", "ConditionsAccessFailure", r"frontier|conditions (?:database|db)|squid"),
    _rule("user_sandbox", "UserSandboxMissing", r"user (?:tarball|sandbox|code) (?:could not|not available|missing)|usenewcode"),
    _rule("python_exception", "PayloadException",
          r"traceback \(most recent call last\)|\b[A-Z][A-Za-z]*(?:Error|Exception)\b:|unhandled exception|exception caught"
          r"|unrecognized (?:transform )?arguments|non-zero exit code|exit code \d+"),
    _rule("killed_by_server", "JobKilledByServer", r"killed by (?:the )?panda server|killed by (?:owner|user)|aborted by (?:owner|user|operator)"),
)

# At most 80 characters of the token are read (the category is a graph node's name; see _FALLBACK_WORD_CHARS).
_REASON_TOKEN = re.compile(r"\breason\s*=\s*['\"]?([A-Za-z][A-Za-z0-9_]{0,79})")
_PILOT_CODE = re.compile(
    r"\bpilot(?:[ _-]?err(?:or)?)?(?:[ _-]?code)?\s*[:=#]?\s*\(?\s*(1\d{3})\b"
    r"|\bpilotErrorCode\s*[:=]?\s*(1\d{3})\b",
    re.IGNORECASE,
)
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[A-Za-z][A-Za-z']*")

# Words that carry no diagnostic meaning and would make fallback names unstable or noisy.
_FALLBACK_STOPWORDS = frozenset(
    """a an the and or of to in on at for by with from is are was were be been has have had this that these those
    it its as task job jobs since due because error failed failure status info warning see log logs link
    http https www html details here""".split()
)
_FALLBACK_WORDS = 3
# Letters kept of each of those words: a dialog of one long token (a path, an encoded blob; the task table's
# column holds 510 characters) made a symptom name longer than a graph node takes, and routing the task failed.
_FALLBACK_WORD_CHARS = 40


def strip_html(text: str) -> str:
    """Remove tags and entities and collapse whitespace, keeping the words a human would read."""
    without_tags = _TAG.sub(" ", text or "")
    return _SPACE.sub(" ", html.unescape(without_tags)).strip()


def _camel(word: str) -> str:
    return word[:1].upper() + word[1:]


def _pilot_code(text: str) -> int | None:
    match = _PILOT_CODE.search(text)
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def _fallback_category(text: str) -> str:
    # Apostrophes go entirely ("didn't" -> "didnt"): a category is an identifier, CamelCase letters only.
    words = [w.replace("'", "") for w in _WORD.findall(text)]
    meaningful = [w for w in words if len(w) > 1 and w.lower() not in _FALLBACK_STOPWORDS]
    if not meaningful:
        return "UnclassifiedEmpty"
    return "Unclassified" + "".join(_camel(w.lower()[:_FALLBACK_WORD_CHARS]) for w in meaningful[:_FALLBACK_WORDS])


def classify_error_dialog(text: str) -> ErrorClass:
    """Classify one errorDialog. Pure: the same text always yields the same ErrorClass."""
    plain = strip_html(text)
    code = _pilot_code(plain)

    reason = _REASON_TOKEN.search(plain)
    if reason:
        word = reason.group(1)
        alias = REASON_ALIASES.get(word.lower())
        if alias:
            return ErrorClass(category=alias, matched_rule=f"reason:{word}", pilot_error_code=code,
                              confidence=_CONF_REASON_KNOWN, plain_text=plain)
        verbatim = "".join(_camel(part) for part in re.split(r"_+", word) if part)
        return ErrorClass(category=verbatim, matched_rule=f"reason:{word}", pilot_error_code=code,
                          confidence=_CONF_REASON_VERBATIM, plain_text=plain)

    known = PILOT_ERROR_CATEGORIES.get(code) if code is not None else None
    if known and not known.generic:
        return ErrorClass(category=known.category, matched_rule=f"pilot:{code}", pilot_error_code=code,
                          confidence=_CONF_PILOT_SPECIFIC, plain_text=plain)

    for rule in PHRASE_RULES:
        if rule.pattern.search(plain):
            return ErrorClass(category=rule.category, matched_rule=f"phrase:{rule.name}", pilot_error_code=code,
                              confidence=_CONF_PHRASE, plain_text=plain)

    if known:
        return ErrorClass(category=known.category, matched_rule=f"pilot:{code}", pilot_error_code=code,
                          confidence=_CONF_PILOT_GENERIC, plain_text=plain)

    return ErrorClass(category=_fallback_category(plain), matched_rule="fallback", pilot_error_code=code,
                      confidence=_CONF_FALLBACK, plain_text=plain)


def known_categories() -> frozenset[str]:
    """Every category a rule (not the fallback) can produce, for callers that validate or document."""
    return frozenset(
        {pc.category for pc in PILOT_ERROR_CATEGORIES.values()}
        | {r.category for r in PHRASE_RULES}
        | set(REASON_ALIASES.values())
    )
