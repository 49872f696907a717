"""What is never allowed, whatever a rule says: shells, command builders, and the dangerous flags of curl and git.

A rule lists what it allows and everything else is already refused, so these tables are a second, fixed line:
a configuration that declares ``--config`` for curl or ``--upload-pack`` for git does not load, and a request
that uses one is refused with a reason naming what the flag would do instead of a bare "unknown option".

Pure: stdlib only.
"""

from __future__ import annotations

# Programs that run other programs or interpret code: never the executable, never an argument a program
# could hand to exec (git's ``--upload-pack=sh``, a ``find -exec`` style positional).
COMMAND_BUILDERS = frozenset({
    # shells
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "ash", "rbash", "busybox", "pwsh",
    # command builders and wrappers
    "env", "xargs", "sudo", "su", "doas", "nice", "nohup", "timeout", "time", "stdbuf", "setsid", "chroot",
    "unshare", "nsenter", "strace", "ltrace", "gdb", "watch", "flock", "ionice", "taskset", "chrt", "script",
    "expect", "parallel", "runuser", "pkexec", "systemd-run", "firejail", "bwrap", "prlimit", "cpulimit",
    "setpriv", "capsh", "eatmydata", "fakeroot", "proot", "numactl", "exec", "command", "builtin", "eval",
    # interpreters
    "python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "tclsh", "wish", "awk",
    "gawk", "mawk", "nawk", "osascript", "powershell", "cmd", "cmd.exe",
})

# Model-provider keys: never given to an infrastructure command, whatever a family or a tool says.
MODEL_PROVIDER_VARIABLES = frozenset({
    "OPENAI_API_KEY", "BAMBOO_LLM_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY", "GEMINI_API_KEY",
    "GOOGLE_API_KEY", "MISTRAL_API_KEY", "COHERE_API_KEY", "GROQ_API_KEY", "HF_TOKEN", "HUGGINGFACE_API_KEY",
    "OPENROUTER_API_KEY", "TOGETHER_API_KEY", "DEEPSEEK_API_KEY", "XAI_API_KEY",
})
MODEL_PROVIDER_PREFIXES = ("BAMBOO_LLM_", "OPENAI_", "ANTHROPIC_")

# Variables the executor sets itself for every child.
RUNTIME_VARIABLES = frozenset({"PATH", "LANG", "LC_ALL", "HOME", "TZ"})


def is_model_provider_variable(name: str) -> bool:
    upper = name.upper()
    return upper in MODEL_PROVIDER_VARIABLES or upper.startswith(MODEL_PROVIDER_PREFIXES)


# curl options that load configuration, write files, reach other endpoints or weaken transport security.
CURL_DENIED: dict[str, str] = {}
for _why, _spellings in {
    "loads a configuration file": ("-K", "--config", "-q", "--disable"),
    "writes a file": ("-o", "--output", "-O", "--remote-name", "--remote-name-all", "--output-dir", "-J",
                      "--remote-header-name", "--create-dirs", "-c", "--cookie-jar", "-D", "--dump-header",
                      "--trace", "--trace-ascii", "--stderr", "--libcurl", "--etag-save", "--hsts", "--alt-svc"),
    "reads a local file": ("-T", "--upload-file", "-F", "--form", "--form-string", "-b", "--cookie", "-n",
                           "--netrc", "--netrc-file", "--netrc-optional", "--etag-compare", "-E", "--cert",
                           "--key", "--cacert", "--capath", "--crlfile", "--pinnedpubkey", "--variable",
                           "--engine", "--random-file", "--egd-file"),
    "sends the request through another endpoint": (
        "-x", "--proxy", "--preproxy", "-U", "--proxy-user", "--socks4", "--socks4a", "--socks5",
        "--socks5-hostname", "--resolve", "--connect-to", "--dns-servers", "--doh-url", "--interface",
        "--unix-socket", "--abstract-unix-socket", "-L", "--location", "--location-trusted", "--haproxy-protocol",
        "--noproxy", "-p", "--proxytunnel",
        # the request line names another target than the URL (an absolute form reaches any path on the host);
        # --path-as-is keeps the '.' and '..' segments curl would otherwise resolve before url_paths saw them
        "--request-target", "--path-as-is"),
    "starts a second request with fresh options": ("-:", "--next"),
    "disables transport security": ("-k", "--insecure", "--proxy-insecure", "--doh-insecure"),
}.items():
    for _spelling in _spellings:
        CURL_DENIED[_spelling] = _why

# Prefixes of long curl options that are all denied (every --proxy-* and --socks5-* option).
CURL_DENIED_PREFIXES: dict[str, str] = {
    "--proxy-": "sends the request through another endpoint",
    "--socks": "sends the request through another endpoint",
    "--expand-": "expands variables from files and the environment",
}

# Options the dialect places itself, ahead of the request: ``--disable`` must be first so ``~/.curlrc``
# never loads; no URL globbing; only http(s), also on redirects.
CURL_LEADING = ("--disable", "--globoff", "--proto", "=http,https", "--proto-redir", "=http,https")

# Every long option of curl (7.88, ``curl --help all``). curl reads an unambiguous prefix of a long option as that
# option, so a rule naming ``--jso`` or ``--upload-fi`` got ``--json`` (a POST judged GET) or ``--upload-file``
# (banned) past every check made on the spelling: a curl rule names each long option exactly as listed here.
# An option newer than this list is refused until it is added, never guessed at.
CURL_LONG_OPTIONS = frozenset({
    "--abstract-unix-socket", "--alt-svc", "--anyauth", "--append", "--aws-sigv4", "--basic", "--cacert",
    "--capath", "--cert", "--cert-status", "--cert-type", "--ciphers", "--compressed", "--compressed-ssh",
    "--config", "--connect-timeout", "--connect-to", "--continue-at", "--cookie", "--cookie-jar", "--create-dirs",
    "--create-file-mode", "--crlf", "--crlfile", "--curves", "--data", "--data-ascii", "--data-binary",
    "--data-raw", "--data-urlencode", "--delegation", "--digest", "--disable", "--disable-eprt", "--disable-epsv",
    "--disallow-username-in-url", "--dns-interface", "--dns-ipv4-addr", "--dns-ipv6-addr", "--dns-servers",
    "--doh-cert-status", "--doh-insecure", "--doh-url", "--dump-header", "--egd-file", "--engine",
    "--etag-compare", "--etag-save", "--expect100-timeout", "--fail", "--fail-early", "--fail-with-body",
    "--false-start", "--form", "--form-escape", "--form-string", "--ftp-account", "--ftp-alternative-to-user",
    "--ftp-create-dirs", "--ftp-method", "--ftp-pasv", "--ftp-port", "--ftp-pret", "--ftp-skip-pasv-ip",
    "--ftp-ssl-ccc", "--ftp-ssl-ccc-mode", "--ftp-ssl-control", "--get", "--globoff",
    "--happy-eyeballs-timeout-ms", "--haproxy-protocol", "--head", "--header", "--help", "--hostpubmd5",
    "--hostpubsha256", "--hsts", "--http0.9", "--http1.0", "--http1.1", "--http2", "--http2-prior-knowledge",
    "--http3", "--http3-only", "--ignore-content-length", "--include", "--insecure", "--interface", "--ipv4",
    "--ipv6", "--json", "--junk-session-cookies", "--keepalive-time", "--key", "--key-type", "--krb", "--libcurl",
    "--limit-rate", "--list-only", "--local-port", "--location", "--location-trusted", "--login-options",
    "--mail-auth", "--mail-from", "--mail-rcpt", "--mail-rcpt-allowfails", "--manual", "--max-filesize",
    "--max-redirs", "--max-time", "--metalink", "--negotiate", "--netrc", "--netrc-file", "--netrc-optional",
    "--next", "--no-alpn", "--no-buffer", "--no-clobber", "--no-keepalive", "--no-npn", "--no-progress-meter",
    "--no-sessionid", "--noproxy", "--ntlm", "--ntlm-wb", "--oauth2-bearer", "--output", "--output-dir",
    "--parallel", "--parallel-immediate", "--parallel-max", "--pass", "--path-as-is", "--pinnedpubkey",
    "--post301", "--post302", "--post303", "--preproxy", "--progress-bar", "--proto", "--proto-default",
    "--proto-redir", "--proxy", "--proxy-anyauth", "--proxy-basic", "--proxy-cacert", "--proxy-capath",
    "--proxy-cert", "--proxy-cert-type", "--proxy-ciphers", "--proxy-crlfile", "--proxy-digest", "--proxy-header",
    "--proxy-insecure", "--proxy-key", "--proxy-key-type", "--proxy-negotiate", "--proxy-ntlm", "--proxy-pass",
    "--proxy-pinnedpubkey", "--proxy-service-name", "--proxy-ssl-allow-beast", "--proxy-ssl-auto-client-cert",
    "--proxy-tls13-ciphers", "--proxy-tlsauthtype", "--proxy-tlspassword", "--proxy-tlsuser", "--proxy-tlsv1",
    "--proxy-user", "--proxy1.0", "--proxytunnel", "--pubkey", "--quote", "--random-file", "--range", "--rate",
    "--raw", "--referer", "--remote-header-name", "--remote-name", "--remote-name-all", "--remote-time",
    "--remove-on-error", "--request", "--request-target", "--resolve", "--retry", "--retry-all-errors",
    "--retry-connrefused", "--retry-delay", "--retry-max-time", "--sasl-authzid", "--sasl-ir", "--service-name",
    "--show-error", "--silent", "--socks4", "--socks4a", "--socks5", "--socks5-basic", "--socks5-gssapi",
    "--socks5-gssapi-nec", "--socks5-gssapi-service", "--socks5-hostname", "--speed-limit", "--speed-time",
    "--ssl", "--ssl-allow-beast", "--ssl-auto-client-cert", "--ssl-no-revoke", "--ssl-reqd",
    "--ssl-revoke-best-effort", "--sslv2", "--sslv3", "--stderr", "--styled-output", "--suppress-connect-headers",
    "--tcp-fastopen", "--tcp-nodelay", "--telnet-option", "--tftp-blksize", "--tftp-no-options", "--time-cond",
    "--tls-max", "--tls13-ciphers", "--tlsauthtype", "--tlspassword", "--tlsuser", "--tlsv1", "--tlsv1.0",
    "--tlsv1.1", "--tlsv1.2", "--tlsv1.3", "--tr-encoding", "--trace", "--trace-ascii", "--trace-time",
    "--unix-socket", "--upload-file", "--url", "--url-query", "--use-ascii", "--user", "--user-agent",
    "--verbose", "--version", "--write-out", "--xattr",
})

# curl options whose value is a URL; the rest of the dialect requires them to be declared as ``url``.
CURL_URL_OPTIONS = frozenset({"--url"})

# curl options that send a request body (their presence means POST unless --request says otherwise).
CURL_BODY_OPTIONS = frozenset({"--data", "--data-raw", "--data-ascii", "--data-binary", "--data-urlencode",
                               "--json"})

# curl options that add to the URL's query string (curl 7.87+), with --data-urlencode's syntax.
CURL_QUERY_OPTIONS = frozenset({"--url-query"})

# The value kinds a rule may declare for curl's body, query and URL options. curl reads a file for a leading '@'
# of --data, --data-ascii, --data-binary and --json, and for 'name@file' anywhere in --data-urlencode and
# --url-query (the first '=' or, without one, the first '@' splits name from content): as `text`, which refuses
# only a leading '@', `--url-query x@/proc/self/environ` sent a local file to the allow-listed host.
CURL_VALUE_KINDS: dict[str, tuple[str, ...]] = {
    "--data": ("form", "json"), "--data-ascii": ("form", "json"), "--data-binary": ("form", "json"),
    "--data-raw": ("form", "json"), "--data-urlencode": ("form",), "--url-query": ("form",), "--json": ("json",),
    "--url": ("url",),
}

# Whatever their declared kind, the values of these options may hold no '@' at all (checked at evaluation).
CURL_NO_AT_OPTIONS = CURL_BODY_OPTIONS | CURL_QUERY_OPTIONS

# In a --write-out format, '%output{name}' (curl 8.3+) sends the rest of the output to a file: refused in every
# curl value, whatever the executor's curl version (the option table above is 7.88's and is not checked against it).
CURL_WRITE_OUT_FILE = "%output{"

# The long option each short spelling is to curl, for the options that decide the HTTP method. A rule may emit
# an option by either spelling (``OptionSpec.name``); the method is judged by what curl does with it, so a read
# rule that names ``--data`` as ``-d`` or ``--request`` as ``-X`` still reads as the POST it sends.
CURL_LONG_NAMES = {"-X": "--request", "-d": "--data", "-G": "--get", "-I": "--head"}

GIT_DENIED: dict[str, str] = {}
for _why, _spellings in {
    "sets configuration, which can name programs to run": ("-c", "--config-env", "--config"),
    "names a program to run": ("--exec-path", "--upload-pack", "--receive-pack", "--exec", "-x",
                               "--open-files-in-pager", "-O", "--ext-diff", "--textconv", "--extcmd", "--tool"),
    "writes outside the repository": ("--output", "--template", "--separate-git-dir", "--output-directory"),
    "contacts another repository": ("--remote",),
}.items():
    for _spelling in _spellings:
        GIT_DENIED[_spelling] = _why

# Sub-commands that run configured or given programs, serve repositories or open a browser.
GIT_DENIED_SUBCOMMANDS = frozenset({
    "difftool", "mergetool", "filter-branch", "submodule", "bisect", "rebase", "daemon", "instaweb", "shell",
    "upload-pack", "receive-pack", "upload-archive", "http-backend", "credential", "credential-store",
    "credential-cache", "help", "web--browse", "send-email", "imap-send", "archimport", "cvsimport",
    "cvsserver", "svn", "p4", "quiltimport", "remote-ext", "remote-fd", "hook", "var",
})

# git sub-commands where ``-u`` means ``--upload-pack``.
GIT_UPLOAD_PACK_SHORT = frozenset({"clone", "fetch", "pull", "ls-remote", "archive"})

# Configuration sections whose keys name programs, hooks, helpers or transports.
GIT_CONFIG_SECTIONS = ("core.", "alias.", "include.", "includeif.", "credential.", "filter.", "protocol.",
                       "uploadpack.", "receivepack.", "url.", "http.", "remote.", "diff.", "merge.", "gpg.",
                       "sequence.", "pager.", "browser.", "web.", "man.", "submodule.", "safe.")

# Fixed hardening ahead of the request, over whatever a repository's own config says: no hooks, no
# fsmonitor program, no ext:: or fd:: transports, no pager, no ssh or gpg program.
GIT_LEADING = ("--no-pager", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
               "-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never", "-c", "core.sshCommand=false",
               "-c", "gpg.program=false")

# The git environment: no system or global configuration, no prompts, and no optional locks: without
# GIT_OPTIONAL_LOCKS=0 a `git status` refreshes the stat data and rewrites .git/index (taking index.lock), so a
# read wrote the repository and could make a concurrent write fail.
GIT_ENVIRONMENT = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
                   "GIT_OPTIONAL_LOCKS": "0"}

# git options whose values are paths and must therefore be declared as root-bounded paths.
GIT_PATH_OPTIONS = frozenset({"-C", "--git-dir", "--work-tree"})

# The dialect a program's basename calls for: a tool running curl or git always gets its dialect's bans and
# fixed hardening (without a dialect, `executable = "curl"` loaded as generic and took file:// and gopher://).
DIALECT_PROGRAMS = {"curl": "curl", "git": "git"}

# PanDA's legacy API, /server/panda/<method>: the server still routes seven methods there (its allowed_methods,
# bamboo/panda/simulator/legacy.py) and every one of them writes, taking its parameters from the query string of
# a GET or HEAD. A path under it is never a read, whatever a rule says. The names are the load-time probes.
PANDA_LEGACY_SEGMENTS = ("server", "panda")
PANDA_LEGACY_METHODS = ("relay_idds_command", "execute_idds_workflow_command", "putEventPickingRequest",
                        "put_checkpoint", "delete_checkpoint", "put_file_recovery_request", "put_workflow_request")


# Variables that make a dynamic loader, a shell or an interpreter run code of their choosing: never in a tool's
# fixed environment (bash wrappers such as panda-client's launchers read BASH_ENV before their first line).
_CODE_VARIABLES = frozenset({"BASH_ENV", "ENV", "PYTHONSTARTUP", "PYTHONINSPECT", "PERL5OPT", "PERL5DB", "RUBYOPT",
                             "NODE_OPTIONS", "PROMPT_COMMAND", "PS4", "SHELLOPTS", "BASHOPTS", "IFS", "CDPATH"})
_CODE_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_")


def denied_environment(dialect: str, name: str) -> str | None:
    """Why a tool's fixed environment may not set ``name``, or None."""
    upper = name.upper()
    if upper in _CODE_VARIABLES or upper.startswith(_CODE_PREFIXES):
        return "makes the loader, a shell or an interpreter run other code"
    if dialect == "curl" and (upper.endswith("_PROXY") or upper in ("CURL_HOME", "SSLKEYLOGFILE", "NO_PROXY")):
        return "changes where curl connects, what configuration it reads or where it writes TLS keys"
    if dialect == "git" and upper.startswith("GIT_"):
        return "overrides git's configuration, programs or repository; the git dialect sets its own"
    return None


def denied_option(dialect: str, spelling: str, subcommand: tuple[str, ...] = ()) -> str | None:
    """Why ``spelling`` is never allowed for this dialect, or None."""
    if dialect == "curl":
        if spelling in CURL_DENIED:
            return CURL_DENIED[spelling]
        for prefix, why in CURL_DENIED_PREFIXES.items():
            if spelling.startswith(prefix):
                return why
        if spelling.startswith("--") and spelling not in CURL_LONG_OPTIONS:
            return "is not one of curl's option names in full (curl reads a prefix as the option it starts)"
    if dialect == "git":
        if spelling in GIT_DENIED:
            return GIT_DENIED[spelling]
        # git's parse-options reads an unambiguous prefix of a long option as that option, too
        abbreviated = next((full for full in GIT_DENIED if full.startswith("--") and full.startswith(spelling)
                            and len(spelling) > 2), None)
        if spelling.startswith("--") and abbreviated is not None:
            return f"abbreviates {abbreviated}, which {GIT_DENIED[abbreviated]}"
        if spelling == "-u" and subcommand[:1] and subcommand[0] in GIT_UPLOAD_PACK_SHORT:
            return "names a program to run (--upload-pack)"
    return None
