#!/usr/bin/env python3
"""Write eshard-mpi's man page and bash completion from the binary's own --help.

The build runs this after linking (CMakeLists.txt), so the man page and the completion list
every command and every option the binary has, and never drift from it:

    gen-docs.py --bin build/eshard-mpi --man build/eshard-mpi.1 --completion build/eshard-mpi.bash

It reads `eshard-mpi --help` (the command table), `eshard-mpi --version`, and
`eshard-mpi <command> --help` for every command: the summary, one line per option
("  --name METAVAR" padded to 30 columns, then the help) and the paragraph after the options.
An option line it cannot read is an error (exit 1), not a silent omission.
"""

import argparse
import re
import shlex
import subprocess
import sys

OPT_RE = re.compile(r"^--[a-z0-9][a-z0-9-]*$")

# The man page's EXAMPLES: (what it does, the command). check_examples() refuses an example whose
# command or options the binary's --help does not have, so that they cannot drift from it.
EXAMPLES = [
    ("Run a job on 4 nodes, one rank a node, with the Data\\-Juicer of a virtual environment on the "
     "nodes; the same command again resumes it:",
     "mpirun -np 4 -npernode 1 --bind-to none eshard-mpi run --config recipe.yaml \\\n"
     "  --dataset-path /shared/in --job-dir /shared/jobs/j1 \\\n"
     "  --python /opt/venv-dj/bin/python --dj-process /opt/venv-dj/bin/dj-process"),
    ("The same on one machine (a singleton MPI start, one rank):",
     "eshard-mpi run --config recipe.yaml --dataset-path data/ --job-dir /tmp/jobs/j1"),
    ("Any JSONL-to-JSONL program instead of Data\\-Juicer:",
     "eshard-mpi run --config recipe.yaml --dataset-path in.jsonl --job-dir /tmp/jobs/j2 \\\n"
     "  --process-cmd 'prog --in {input} --out {output}'"),
    ("Watch a job from any node:",
     "eshard-mpi status --job-dir /shared/jobs/j1 --watch"),
    ("Requeue its failed shards, then run the same mpirun command again:",
     "eshard-mpi retry --job-dir /shared/jobs/j1 --all-failed"),
    ("Write the HTML report of a job:",
     "eshard-mpi report --job-dir /shared/jobs/j1 --output j1.html"),
]

# Options whose value is one of a few words, for the completion: each word must appear in the
# option's --help text (check_choices), so a renamed mode cannot be offered.
CHOICES = {"--ray-mode": ["per-rank", "per-attempt"]}

# The launchers after which the completion finds "eshard-mpi" and completes from there.
LAUNCHERS = ["mpirun", "mpiexec", "mpirun.openmpi", "mpiexec.openmpi", "mpiexec.mpich", "mpiexec.hydra", "srun"]
METAVAR_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def run_help(binary, *args):
    p = subprocess.run([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=60)
    if p.returncode != 0:
        sys.exit("gen-docs: '%s %s' exited with %d: %s" % (binary, " ".join(args), p.returncode,
                                                          p.stderr.decode(errors="replace")))
    return p.stdout.decode("utf-8")


def parse_top(text):
    """(description lines, [(command, summary)]) from `eshard-mpi --help`."""
    lines = text.splitlines()
    try:
        start = lines.index("commands:")
    except ValueError:
        sys.exit("gen-docs: no 'commands:' in eshard-mpi --help")
    desc = [l for l in lines[1:start] if l.strip()]
    cmds = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        m = re.match(r"^  (\S+) +(\S.*)$", line)
        if not m:
            sys.exit("gen-docs: cannot read command line %r" % line)
        cmds.append((m.group(1), m.group(2)))
    if not cmds:
        sys.exit("gen-docs: no commands in eshard-mpi --help")
    return desc, cmds


def parse_option(line):
    """(name, metavar or None, help) of one option line."""
    body = line[2:]
    # "%-30s %s": the left part fills 30 columns, or is longer and ends at its first
    # single space after the name and the optional metavar.
    if len(body) > 31 and body[30] == " " and body[:30].strip() and body[31] != " ":
        left, help_text = body[:30].rstrip(), body[31:]
    else:
        parts = body.split(" ")
        left = parts[0]
        rest = parts[1:]
        if rest and METAVAR_RE.match(rest[0]):
            left += " " + rest[0]
            rest = rest[1:]
        help_text = " ".join(rest).strip()
    words = left.split()
    if not words or not OPT_RE.match(words[0]) or len(words) > 2 or \
            (len(words) == 2 and not METAVAR_RE.match(words[1])) or not help_text:
        sys.exit("gen-docs: cannot read option line %r" % line)
    return words[0], (words[1] if len(words) == 2 else None), help_text


def parse_command(name, text):
    """{summary, options: [(name, metavar, help)], details: [lines]} of `<name> --help`."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("usage: eshard-mpi %s" % name):
        sys.exit("gen-docs: unexpected help of %s: %r" % (name, lines[:1]))
    try:
        start = lines.index("options:")
    except ValueError:
        sys.exit("gen-docs: no 'options:' in eshard-mpi %s --help" % name)
    summary = " ".join(l.strip() for l in lines[1:start] if l.strip())
    opts = []
    i = start + 1
    while i < len(lines) and lines[i].strip():
        if not lines[i].startswith("  --"):
            sys.exit("gen-docs: cannot read option line %r of %s" % (lines[i], name))
        opts.append(parse_option(lines[i]))
        i += 1
    details = [l for l in lines[i:] if l.strip()]
    return {"summary": summary, "options": opts, "details": details}


def roff(text):
    """Escape text for one troff input line."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def man_page(version, desc, cmds, helps):
    out = []
    w = out.append
    w('.\\" Generated by scripts/gen-docs.py from the --help of %s; do not edit.' % version)
    w('.TH ESHARD\\-MPI 1 "" "%s" "User Commands"' % roff(version))
    w(".nh")
    w(".ad l")
    w(".SH NAME")
    w("eshard\\-mpi \\- process one large JSONL dataset with Data\\-Juicer on many nodes")
    w(".SH SYNOPSIS")
    w(".B mpirun \\-np")
    w(".I N")
    w(".B \\-npernode 1 eshard\\-mpi run")
    w(".RI [ options ]")
    w(".br")
    w(".B eshard\\-mpi")
    w(".I command")
    w(".RI [ options ]")
    w(".br")
    w(".B eshard\\-mpi")
    w(".RB [ \\-\\-help | \\-\\-version ]")
    w(".SH DESCRIPTION")
    for line in desc:
        w(roff(line.strip()))
    w(".PP")
    w("Commands:")
    for name, summary in cmds:
        w(".TP")
        w(".B %s" % roff(name))
        w(roff(summary))
    w(".PP")
    w("Every command also takes")
    w(".B \\-\\-help")
    w("(its options) and")
    w(".BR \\-\\-version .")
    w(".SH COMMANDS")
    for name, _ in cmds:
        h = helps[name]
        w('.SS "eshard\\-mpi %s [options]"' % roff(name))
        w(roff(h["summary"]))
        for opt, metavar, text in h["options"]:
            w(".TP")
            if metavar:
                w('.BI %s " %s"' % (roff(opt), roff(metavar)))
            else:
                w(".B %s" % roff(opt))
            w(roff(text))
        if h["details"]:
            w(".PP")
            for line in h["details"]:
                w(roff(line.strip()))
    w(".SH EXAMPLES")
    for text, cmd in EXAMPLES:
        w(".PP")
        w(text)
        w(".PP")
        w(".RS 4")
        w(".nf")
        for line in cmd.split("\n"):
            w(roff(line))
        w(".fi")
        w(".RE")
    w(".SH EXIT STATUS")
    w("Each command lists its exit codes above. In short: 0 success; 2 bad input, a usage error,")
    w("failed shards, a failed verification or any other error;")
    w(".B status")
    w("and")
    w(".B verify")
    w("exit 1 for a job that is not complete yet (no shard failed);")
    w('.BR run " and " worker')
    w("exit 128+signal when they were stopped (143 for SIGTERM). Under")
    w(".BR mpirun ,")
    w("every rank of")
    w(".B run")
    w("exits with the same code, and so does the launcher, except when the launcher itself gets")
    w("SIGTERM or SIGINT: Open MPI's")
    w(".B mpirun")
    w("then returns 1 whatever the ranks return, MPICH's")
    w(".B mpiexec")
    w("(hydra) returns 143 after SIGTERM, but sometimes 0. After a stop,")
    w(".B eshard\\-mpi status")
    w("(0 only when every shard is done) tells whether the job completed.")
    w(".SH ENVIRONMENT")
    env = [
        ("ESHARD_DJ_HELPER", "the Data\\-Juicer operator registry helper (default: dj_op_kinds.py, see FILES)"),
        ("ESHARD_DJ_RUNNER", "the per\\-rank Data\\-Juicer runner (default: dj_runner.py, see FILES)"),
        ("PAI_JOB_ID, DLC_JOB_ID, JOB_ID, SLURM_JOB_ID",
         "the run id of \\fBrun\\fR when \\fB\\-\\-run\\-id\\fR is not given (the first one set)"),
        ("RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 PIP_NO_INDEX=1",
         "recommended on offline clusters: Data\\-Juicer then fails fast instead of waiting for the network"),
    ]
    for name, text in env:
        w(".TP")
        w(".B %s" % roff(name))
        w(text)
    w(".SH FILES")
    w(".TP")
    w(".I <prefix>/share/eshard\\-mpi/")
    w("dj_op_kinds.py and dj_runner.py, the Python helpers that talk to Data\\-Juicer (found")
    w("relative to the binary, as ../share/eshard\\-mpi/); dlc\\-mpijob.sh and slurm\\-eshard.sbatch,")
    w("the launchers for PAI\\-DLC MPIJobs and Slurm.")
    w(".TP")
    w(".I <job\\-dir>/")
    w("the job folder: manifest.json, recipe.yaml, shards/, attempts/, state/, merged.jsonl.")
    w(".SH SEE ALSO")
    w(".BR mpirun (1),")
    w(".BR srun (1)")
    return "\n".join(out) + "\n"


def check_examples(cmds, helps):
    """Every example names a command of the binary and only options that command has."""
    names = {n for n, _ in cmds}
    for _, cmd in EXAMPLES:
        words = shlex.split(cmd.replace("\\\n", " "))
        at = words.index("eshard-mpi")
        sub = words[at + 1]
        if sub not in names:
            sys.exit("gen-docs: the example %r names no command of eshard-mpi" % cmd)
        have = {o for o, _, _ in helps[sub]["options"]}
        for word in words[at + 2:]:
            if OPT_RE.match(word) and word not in have:
                sys.exit("gen-docs: the example %r uses %s, which 'eshard-mpi %s --help' lacks" % (cmd, word, sub))


def check_choices(helps):
    """Every word of CHOICES is in the option's help text, in every command that has it."""
    for h in helps.values():
        for opt, _, text in h["options"]:
            for word in CHOICES.get(opt, []):
                if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(word), text):
                    sys.exit("gen-docs: %s's help does not name its value %s" % (opt, word))


def value_kind(metavar):
    if metavar == "DIR":
        return "dir"
    if metavar == "PATH":
        return "file"
    return "value"


def completion(version, cmds, helps):
    names = " ".join(n for n, _ in cmds)
    out = []
    w = out.append
    w("# bash completion for eshard-mpi: commands, their options, files and folders for their")
    w("# PATH and DIR values. Generated by scripts/gen-docs.py from the --help of %s." % version)
    w("_eshard_mpi() {")
    w("  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}")
    w("  local opts='' files='' dirs='' values=''")
    w("  COMPREPLY=()")
    w("  if [ \"$COMP_CWORD\" -le 1 ]; then")
    w("    COMPREPLY=($(compgen -W '%s --help --version' -- \"$cur\"))" % names)
    w("    return 0")
    w("  fi")
    w("  case ${COMP_WORDS[1]} in")
    for name, _ in cmds:
        kinds = {"file": [], "dir": [], "value": []}
        all_opts = []
        for opt, metavar, _ in helps[name]["options"]:
            all_opts.append(opt)
            if metavar:
                kinds[value_kind(metavar)].append(opt)
        w("    %s)" % name)
        w("      opts='%s'" % " ".join(all_opts))
        w("      files='%s' dirs='%s' values='%s' ;;" % (" ".join(kinds["file"]), " ".join(kinds["dir"]),
                                                        " ".join(kinds["value"])))
    w("    *) return 0 ;;")
    w("  esac")
    w("  case \" $dirs \" in *\" $prev \"*)")
    w("    compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- \"$cur\")); return 0 ;; esac")
    w("  case \" $files \" in *\" $prev \"*)")
    w("    compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\")); return 0 ;; esac")
    w("  case $prev in")
    for opt, words in sorted(CHOICES.items()):
        w("    %s) COMPREPLY=($(compgen -W '%s' -- \"$cur\")); return 0 ;;" % (opt, " ".join(words)))
    w("  esac")
    w("  case \" $values \" in *\" $prev \"*) return 0 ;; esac")
    w("  COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))")
    w("}")
    w("complete -F _eshard_mpi eshard-mpi")
    w("")
    w("# After a launcher (mpirun -np 2 eshard-mpi run --<TAB>): complete from the eshard-mpi word on")
    w("# as above; before it, as the launcher's own completion did (the one loaded when this file was,")
    w("# such as Slurm's for srun), else file names. bash-completion loads this file for eshard-mpi,")
    w("# mpirun and mpiexec (installed under each name); srun keeps Slurm's completion until this file")
    w("# is loaded (by completing eshard-mpi once, or by sourcing it).")
    w("declare -gA _eshard_mpi_launcher_prev")
    w("_eshard_mpi_launcher() {")
    w("  local i")
    w("  for ((i = 1; i < COMP_CWORD; i++)); do")
    w("    case ${COMP_WORDS[i]} in")
    w("      eshard-mpi | */eshard-mpi)")
    w("        local -a COMP_WORDS=(\"${COMP_WORDS[@]:i}\")")
    w("        local COMP_CWORD=$((COMP_CWORD - i))")
    w("        _eshard_mpi eshard-mpi \"$2\" \"${COMP_WORDS[COMP_CWORD-1]}\"")
    w("        return 0 ;;")
    w("    esac")
    w("  done")
    w("  local prev=${_eshard_mpi_launcher_prev[$1]:-}")
    w("  if [ -n \"$prev\" ] && declare -F \"$prev\" >/dev/null; then")
    w("    \"$prev\" \"$@\"")
    w("    return")
    w("  fi")
    w("  compopt -o default 2>/dev/null")
    w("  COMPREPLY=()")
    w("}")
    w("for _eshard_mpi_c in %s; do" % " ".join(LAUNCHERS))
    w("  if ! complete -p \"$_eshard_mpi_c\" >/dev/null 2>&1 && declare -F __load_completion >/dev/null &&")
    w("     [ \"$_eshard_mpi_c\" = srun ]; then")
    w("    __load_completion srun 2>/dev/null")
    w("  fi")
    w("  _eshard_mpi_spec=$(complete -p \"$_eshard_mpi_c\" 2>/dev/null)")
    w("  case $_eshard_mpi_spec in")
    w("    *' -F _eshard_mpi_launcher '*) ;;")
    w("    *' -F '*)")
    w("      _eshard_mpi_spec=${_eshard_mpi_spec#* -F }")
    w("      _eshard_mpi_launcher_prev[$_eshard_mpi_c]=${_eshard_mpi_spec%% *} ;;")
    w("  esac")
    w("  complete -F _eshard_mpi_launcher \"$_eshard_mpi_c\"")
    w("done")
    w("unset _eshard_mpi_c _eshard_mpi_spec")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the eshard-mpi binary")
    ap.add_argument("--man", help="write the man page here")
    ap.add_argument("--completion", help="write the bash completion here")
    a = ap.parse_args()
    version = run_help(a.bin, "--version").strip()
    desc, cmds = parse_top(run_help(a.bin, "--help"))
    helps = {name: parse_command(name, run_help(a.bin, name, "--help")) for name, _ in cmds}
    check_examples(cmds, helps)
    check_choices(helps)
    for path, text in ((a.man, man_page(version, desc, cmds, helps) if a.man else None),
                       (a.completion, completion(version, cmds, helps) if a.completion else None)):
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
