"""Write eval_sets/typer-docs.jsonl: labelled questions for Typer 0.9.0's docs (a held-out set).

    .venv/bin/python bench/docs_set.py --set typer     # the docs, into bench/out/typer-docs
    .venv/bin/python bench/make_typer_docs_set.py      # checks, then writes the set

The questions were written by hand from the pages, as a user of the library would ask them,
before kbtool was run on them (see eval_sets/README.md). Checks, before anything is written:
- answerable questions: each ``doc`` exists under the docs root and its ``evidence`` occurs in
  the page's text with HTML tags removed (the whole-word, case-insensitive match kbtool's question
  loader uses against the store: ``kbtool.evaluation.questions.contains_evidence``);
- unanswerable questions: no term in ``absent`` starts a word anywhere in the 61 pages
  (case-insensitive, release notes included). Near misses name the page that comes closest
  (``near``), which must exist, and say what it gives instead (``why``);
- ``paraphrase`` questions: the content words they share with their evidence sentence and with
  the whole answering page (5-letter prefixes, stop words left out) are printed with ``--overlap``.
Prints the tag counts. Exit status 1 when a check fails (nothing is written then).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from kbtool.evaluation.questions import contains_evidence  # noqa: E402

DOCS = HERE / "out" / "typer-docs"
OUT = ROOT / "eval_sets" / "typer-docs.jsonl"


def R(doc, evidence, grade=2):
    return {"doc": doc, "evidence": evidence, "grade": grade}


# (question, relevant, tags); unanswerable ones: (question, {"absent": [...], "near": doc, "why": ...}, tags)
Q = [
    # ---------------- exact identifiers: functions, parameters, options, environment variables ----------------
    ("What does pretty_exceptions_show_locals=False do?",
     [R("tutorial/exceptions.md", "And now when you run it, you will see the error without the local variables")], ["exact-id"]),
    ("What does setting _TYPER_STANDARD_TRACEBACK=1 change?",
     [R("tutorial/exceptions.md", "You could also achieve the same with the environment variable _TYPER_STANDARD_TRACEBACK=1.")], ["exact-id"]),
    ("When is ctx.invoked_subcommand None inside a callback?",
     [R("tutorial/commands/context.md", "If it's None, it means that we are not calling a subcommand but the main program (the callback) directly")], ["exact-id"]),
    ("What does invoke_without_command=True do on @app.callback()?",
     [R("tutorial/commands/context.md", "But we could make it run even without a subcommand with invoke_without_command=True")], ["exact-id"]),
    ("Why check ctx.resilient_parsing in a parameter callback?",
     [R("tutorial/options/callback-and-context.md", "The ctx.resilient_parsing will be True when handling completion, so you can just return without printing anything else.")], ["exact-id"]),
    ("What is typer.CallbackParam?",
     [R("tutorial/options/callback-and-context.md", "The typer.CallbackParam is actually just a sub-class of Click's Parameter")], ["exact-id"]),
    ("What does is_eager=True do on a --version option?",
     [R("tutorial/options/version.md", "that it should process this CLI parameter before the others")], ["exact-id"]),
    ("What is the default value of rich_markup_mode?",
     [R("tutorial/commands/help.md", "By default, rich_markup_mode is None, which disables any rich text formatting.")], ["exact-id"]),
    ("Can I use colors in help text with rich_markup_mode=\"markdown\"?",
     [R("tutorial/commands/help.md", "Notice that in Markdown you cannot define colors.")], ["exact-id"]),
    ("How do I mark a command as deprecated with deprecated=True?",
     [R("tutorial/commands/help.md", "You can mark it with the parameter deprecated=True")], ["exact-id"]),
    ("Which string formats does a datetime parameter accept by default?",
     [R("tutorial/parameter-types/datetime.md", "Typer will accept any string from the following formats")], ["exact-id"]),
    ("How do I make an Enum parameter accept values in any case with case_sensitive?",
     [R("tutorial/parameter-types/enum.md", "You can make an Enum (choice) CLI parameter be case-insensitive with the case_sensitive parameter")], ["exact-id"]),
    ("What does clamp=True do on an int option with min and max?",
     [R("tutorial/parameter-types/number.md", "use the closest minimum or maximum valid values")], ["exact-id"]),
    ("What value does my function receive for an option declared with count=True?",
     [R("tutorial/parameter-types/number.md", "And the value you receive in the function will be the amount of times that --verbose was added")], ["exact-id"]),
    ("Does resolve_path expand ~ in a Path parameter?",
     [R("tutorial/parameter-types/path.md", "It will not expand a tilde-prefix")], ["exact-id"]),
    ("Which mode does typer.FileBinaryWrite open the file with?",
     [R("tutorial/parameter-types/file.md", "typer.FileBinaryWrite: mode=\"wb\", to write binary data.")], ["exact-id"]),
    ("What does atomic=True do for a file parameter?",
     [R("tutorial/parameter-types/file.md", "all writes will actually go to a temporal file and then moved to the final destination after completing")], ["exact-id"]),
    ("What is the default of lazy for files opened for reading?",
     [R("tutorial/parameter-types/file.md", "By default, it's lazy=True for writing and lazy=False for reading.")], ["exact-id"]),
    ("What directory does typer.get_app_dir() give me?",
     [R("tutorial/app-dir.md", "It will give you a directory for storing configurations appropriate for your CLI program for the current user in each operating system.")], ["exact-id"]),
    ("What does locate=True do in typer.launch()?",
     [R("tutorial/launch.md", "You can also make the operating system open the file browser indicating where a file is located with locate=True")], ["exact-id"]),
    ("What exit code does typer.Exit() use when I don't pass one?",
     [R("tutorial/terminating.md", "By default, code is 0, meaning there was no error.")], ["exact-id"]),
    ("What does raising typer.Abort() print?",
     [R("tutorial/terminating.md", "It works more or less the same as typer.Exit() but will print \"Aborted!\" to the screen")], ["exact-id"]),
    ("How do I check result.stderr separately from stdout with CliRunner?",
     [R("tutorial/testing.md", "if your CliRunner instance is created with the mix_stderr=False argument")], ["exact-id"]),
    ("Which wins: a callback passed to typer.Typer(callback=...) or one set with @app.callback()?",
     [R("tutorial/subcommands/callback-override.md", "As @app.callback() takes precedence over typer.Typer(callback=some_function), now our CLI app will use this new callback.")], ["exact-id"]),
    ("What does typer.main.get_command() return?",
     [R("tutorial/using-click.md", "to generate a Click Command (or Group) from a typer.Typer object")], ["exact-id"]),
    ("Does @click.pass_context work on a Typer command?",
     [R("tutorial/using-click.md", "So, things like @click.pass_context won't work.")], ["exact-id"]),
    ("What does the --app option of the typer command do?",
     [R("typer-cli.md", "the name of the variable with a Typer() object to run as the main app.")], ["exact-id"]),
    ("What do I get from installing shellingham alongside Typer?",
     [R("index.md", "and Typer will automatically detect the current shell when installing completion."),
      R("features.md", "Typer will use it to auto-detect the current shell when installing completion.")], ["exact-id"]),
    ("From which Typer version can I use Annotated for options and arguments?",
     [R("tutorial/arguments/optional.md", "Typer added support for Annotated (and started recommending it) in version 0.9.0.")], ["exact-id"]),
    ("What does show_envvar=False do?",
     [R("tutorial/arguments/envvar.md", "By default, environment variables used will be shown in the help text, but you can disable them with show_envvar=False")], ["exact-id"]),
    ("What is default_factory in typer.Argument() for?",
     [R("tutorial/arguments/default.md", "And we can even make the default value be dynamically generated by passing a function as the default_factory argument")], ["exact-id"]),
    ("What does the metavar parameter of typer.Argument() change?",
     [R("tutorial/arguments/help.md", "You can also customize the text used in the generated help text to represent a CLI argument.")], ["exact-id"]),
    ("How do I put commands in their own section of --help with rich_help_panel?",
     [R("tutorial/commands/help.md", "To set the panel for a command you can pass the argument rich_help_panel with the name of the panel you want to use")], ["exact-id"]),
    ("What should the function I pass as parser= return?",
     [R("tutorial/parameter-types/custom-types.md", "should return the parsed value with your own custom type")], ["exact-id"]),
    ("Can I reuse an existing Click custom type with click_type?",
     [R("tutorial/parameter-types/custom-types.md", "you can use it in typer.Argument() and typer.Option() with the click_type parameter")], ["exact-id"]),
    ("How do I get the right program name in --help when my package is run with python -m?",
     [R("tutorial/package.md", "So, to fix the help text to use the correct program name when called with python -m, we can pass it to the app in __main__.py")], ["exact-id"]),
    ("What does the line in [tool.poetry.scripts] do?",
     [R("tutorial/package.md", "That config section tells Poetry that when this package is installed we want it to create a command line program called rick-portal-gun.")], ["exact-id"]),
    ("What does the reset argument of typer.style() do?",
     [R("tutorial/printing.md", "by default a reset-all code is added at the end of the string which means that styles do not carry over")], ["exact-id"]),
    ("What is typer.secho()?",
     [R("tutorial/printing.md", "There's a shorter form to style and print at the same time with typer.secho()")], ["exact-id"]),
    ("Why do my autocompletion help texts not show when I return lists instead of tuples?",
     [R("tutorial/options-autocompletion.md", "Click checks specifically for a tuple when extracting the help text.")], ["exact-id"]),
    ("How do I pass length= to typer.progressbar() and when do I need it?",
     [R("tutorial/progressbar.md", "you can pass an explicit length to typer.progressbar()")], ["exact-id"]),
    ("Can a List[str] argument come before subcommands?",
     [R("tutorial/multiple-values/arguments-with-multiple-values.md", "A List can only be used in the last command (if there are subcommands)")], ["exact-id"]),
    ("Why is the default of a Tuple option (None, None, None) and not just None?",
     [R("tutorial/multiple-values/options-with-multiple-values.md", "You cannot simply use None here as the default because Click doesn't support it.")], ["exact-id"]),
    ("How do I add a short -n name to my --name option?",
     [R("tutorial/options/name.md", "And we are also declaring a CLI option short name of -n.")], ["exact-id"]),
    ("If I only declare -n as the option name, is --name still available?",
     [R("tutorial/options/name.md", "If you only declare a short name like -n then that will be the only CLI option name.")], ["exact-id"]),
    ("How do I get only --force without the automatic --no-force?",
     [R("tutorial/parameter-types/bool.md", "Let's say that we want a --force CLI option only, we want to discard --no-force.")], ["exact-id"]),
    ("How do I name a bool option --accept/--reject instead of --no-accept?",
     [R("tutorial/parameter-types/bool.md", "We can do that by passing a single str with the 2 names for the bool CLI option separated by /")], ["exact-id"]),
    ("My function is called create_user; what will the command be called?",
     [R("tutorial/commands/name.md", "Note that any underscores in the function name will be replaced with dashes.")], ["exact-id"]),
    ("If I set name and help in both typer.Typer() and app.add_typer(), which one is used?",
     [R("tutorial/subcommands/name-and-help.md", "So, app.add_typer(sub_app, name=\"some-name\", help=\"Some help.\") always wins.")], ["exact-id"]),
    ("How do I test a script that only calls typer.run() and has no app object?",
     [R("tutorial/testing.md", "you can still test it, by creating an app during testing")], ["exact-id"]),
    # ---------------- paraphrases: everyday words, not the page's ----------------
    ("A crash report from my tool put a user's credentials on screen; how do I keep those values out of it?",
     [R("tutorial/exceptions.md", "In that case, you can create the typer.Typer() application explicitly and set the parameter pretty_exceptions_show_locals=False")], ["paraphrase"]),
    ("How do I get the plain, old-style crash printout back instead of the decorated boxes?",
     [R("tutorial/exceptions.md", "You can also entirely disable pretty exceptions with the parameter pretty_exceptions_enable=False")], ["paraphrase"]),
    ("How do I make people key in a value a second time to guard against slips?",
     [R("tutorial/options/prompt.md", "In some cases you could want to prompt for something and then ask the user to confirm it by typing it twice.")], ["paraphrase"]),
    ("How can I keep keystrokes invisible while someone enters a secret?",
     [R("tutorial/options/password.md", "When receiving a password, it is very common (in most shells) to not show anything on the screen while typing the password.")], ["paraphrase"]),
    ("How do I bail out early and hand a failure status back to whatever launched my tool?",
     [R("tutorial/terminating.md", "You can pass a code with a number other than 0 to tell the terminal that there was an error in the execution of the program")], ["paraphrase"]),
    ("Where should my tool keep a settings file for each person on their machine?",
     [R("tutorial/app-dir.md", "It will give you a directory for storing configurations appropriate for your CLI program for the current user in each operating system.")], ["paraphrase"]),
    ("Can my script pop up a website in whatever viewer the person normally uses?",
     [R("tutorial/launch.md", "It will launch the appropriate application depending on the URL or file type you pass it")], ["paraphrase"]),
    ("How do I restrict an input to a handful of allowed words?",
     [R("tutorial/parameter-types/enum.md", "To define a CLI parameter that can take a value from a predefined set of values you can use a standard Python enum.Enum")], ["paraphrase"]),
    ("If someone passes a figure above the top limit, can it quietly be lowered to the highest permitted figure instead of rejected?",
     [R("tutorial/parameter-types/number.md", "You might want to, instead of showing an error, use the closest minimum or maximum valid values.")], ["paraphrase"]),
    ("How do I let users repeat a switch to raise how talkative my program gets?",
     [R("tutorial/parameter-types/number.md", "You can make a CLI option work as a counter with the counter parameter")], ["paraphrase"]),
    ("How do I feed pretend keyboard replies to my tool's questions during scripted verification?",
     [R("tutorial/testing.md", "You can test the input typed in the terminal using input=\"camila@example.com\\n\".")], ["paraphrase"]),
    ("How do I give people a visual sense of how far along a slow job is?",
     [R("tutorial/progressbar.md", "You can use Rich's Progress Display to show a progress bar, for example")], ["paraphrase"]),
    ("How do I draw a neat grid with columns in my tool's output?",
     [R("tutorial/printing.md", "In this example, we create a Console, and a Table.")], ["paraphrase"]),
    ("How can diagnostics go to a separate stream so they don't get mixed into results that are piped elsewhere?",
     [R("tutorial/printing.md", "You can print to \"standard error\" creating a Rich Console with stderr=True.")], ["paraphrase"]),
    ("How do I turn my script into something coworkers can set up on their laptops and start by typing one word?",
     [R("tutorial/package.md", "That's what allows your users to install it and have it as an independent program that they can use in their terminal.")], ["paraphrase"]),
    ("When the user leaves something out, can it fall back to a setting exported in their login session?",
     [R("tutorial/arguments/envvar.md", "You can also configure a CLI argument to read a value from an environment variable if it is not provided in the command line as a CLI argument.")], ["paraphrase"]),
    ("How can my tool report which release it is and quit straight away?",
     [R("tutorial/options/version.md", "It would show the version of your CLI program and then it would terminate it.")], ["paraphrase"]),
    ("Can one flag take a bundle of mixed things at once, like a login, a score and a true/false?",
     [R("tutorial/multiple-values/options-with-multiple-values.md", "You can also declare a CLI option that takes several values of different types.")], ["paraphrase"]),
    ("How do I get rid of the auto-suggest hookup I bolted onto my console earlier?",
     [R("tutorial/package.md", "If you want to remove completion you can just delete the added line in that file.")], ["paraphrase"]),
    # ---------------- how-to and plain lookups ----------------
    ("How do I make an option required?",
     [R("tutorial/options/required.md", "To make a CLI option required, you can put typer.Option() inside of Annotated and leave the parameter without a default value.")], ["how-to"]),
    ("How do I make a CLI argument optional?",
     [R("tutorial/arguments/optional.md", "To make a CLI argument optional, use typer.Argument() and pass a different \"default\" as the first parameter")], ["how-to"]),
    ("How do I set the main help text for my whole CLI program?",
     [R("tutorial/commands/help.md", "receives a parameter help that you can pass with the main help text for your CLI program")], ["how-to"]),
    ("How do I add an epilog to a command's help?",
     [R("tutorial/commands/help.md", "If you need, you can also add an epilog section to the help of your commands")], ["how-to"]),
    ("How do I pass a value with spaces in it as a single argument?",
     [R("tutorial/first-steps.md", "If you need to pass a single value that contains spaces to a CLI argument, use quotes")], ["how-to"]),
    ("How do I accept the same option several times and get all the values?",
     [R("tutorial/multiple-values/multiple-options.md", "You can declare a CLI option that can be used multiple times, and then get all the values.")], ["how-to"]),
    ("How do I add options for the main program that come before any command?",
     [R("tutorial/commands/callback.md", "but it declares the CLI parameters for the main CLI application (before the commands)")], ["how-to"]),
    ("How do I accept extra arguments I did not declare instead of getting an error?",
     [R("tutorial/commands/context.md", "you could keep additional CLI parameters not declared in your CLI program with ignore_unknown_options and allow_extra_args")], ["how-to"]),
    ("How do I give a command a different name from its function?",
     [R("tutorial/commands/name.md", "For this, you can set the name of the command in the first parameter for the @app.command() decorator")], ["how-to"]),
    ("How do I ask for a missing option value interactively instead of showing an error?",
     [R("tutorial/options/prompt.md", "ask for the missing value with prompt=True")], ["how-to"]),
    ("How do I ask for confirmation and stop the program if the user says no?",
     [R("tutorial/prompt.md", "there's an integrated parameter abort that does it automatically")], ["how-to"]),
    ("How do I suggest completions for the values of an option?",
     [R("tutorial/options-autocompletion.md", "We can provide completion for the values creating an autocompletion function")], ["how-to"]),
    ("How do I validate an option's value and show an error tied to that option?",
     [R("tutorial/options/callback-and-context.md", "The BadParameter exception is special, it shows the error with the parameter that generated it.")], ["how-to"]),
    ("How do I put several Typer apps from different files together as command groups?",
     [R("tutorial/subcommands/add-typer.md", "Use app.add_typer() to include the app from items.py and users.py")], ["how-to"]),
    ("Why does my app with a single command not show the command's name?",
     [R("tutorial/commands/one-or-multiple.md", "Typer is smart enough to create a CLI application with that single function as the main CLI application, not as a command/subcommand")], []),
    ("Does shell completion work when my package is run with python -m?",
     [R("tutorial/package.md", "Have in mind that TAB completion (shell auto-completion) won't work when using python -m.")], []),
    ("Does Bash show the help text of completion values?",
     [R("tutorial/options-autocompletion.md", "Bash doesn't support showing the help text, but completion will still work the same.")], []),
    ("What is the difference between a CLI argument and a CLI option?",
     [R("tutorial/first-steps.md", "CLI options start with -- and don't depend on the order")], []),
    ("What is Typer's only required dependency?",
     [R("index.md", "Its only internal dependency is Click.")], []),
    ("Can the same function be a Typer command and a FastAPI endpoint?",
     [R("tutorial/commands/index.md", "you could use the same function for a Typer application and a FastAPI application putting both decorators on top")], []),
    ("Are default values shown in the help text by default?",
     [R("tutorial/options/help.md", "In Typer these default values are shown by default."),
      R("tutorial/arguments/help.md", "In Typer these default values are shown by default.")], []),
    ("Can PowerShell users see what my program prints to standard error?",
     [R("tutorial/printing.md", "If you use PowerShell it's quite possible that what you print to \"standard error\" won't be shown in the terminal.")], []),
    # ---------------- unanswerable: things the docs never mention ----------------
    ("How do I set up shell completion for my Typer app in Nushell?",
     {"absent": ["nushell", "nu shell"]}, ["unanswerable"]),
    ("How do I bundle my Typer CLI into a single executable with PyInstaller?",
     {"absent": ["pyinstaller", "nuitka", "single executable", "standalone executable"]}, ["unanswerable"]),
    ("Can a Typer command be an async def function running on asyncio?",
     {"absent": ["async", "asyncio", "await", "coroutine"]}, ["unanswerable"]),
    ("How do I set up logging with loguru in a Typer app?",
     {"absent": ["loguru", "logging", "logger"]}, ["unanswerable"]),
    ("How do I run my Typer CLI inside a Docker container?",
     {"absent": ["docker", "container"]}, ["unanswerable"]),
    ("How do I report crashes from my Typer CLI to Sentry?",
     {"absent": ["sentry", "telemetry"]}, ["unanswerable"]),
    ("How do I distribute my Typer tool through Homebrew?",
     {"absent": ["homebrew", "brew ", "tap"]}, ["unanswerable"]),
    ("How do I migrate an argparse program that uses argcomplete to Typer?",
     {"absent": ["argcomplete"]}, ["unanswerable"]),
    ("How do I load option values from a .env file with python-dotenv?",
     {"absent": ["dotenv", ".env file", "python-dotenv"]}, ["unanswerable"]),
    ("How do I read a password option from the system keyring?",
     {"absent": ["keyring", "keychain"]}, ["unanswerable"]),
    ("How do I run a Typer command on a schedule with cron?",
     {"absent": ["cron", "schedul"]}, ["unanswerable"]),
    # ---------------- unanswerable: topics the docs do not cover ----------------
    ("How do I translate my commands' help texts into other languages?",
     {"absent": ["translat", "i18n", "gettext", "locale", "locali"]}, ["unanswerable"]),
    ("How can one invocation run two commands in parallel?",
     {"absent": ["parallel", "concurren", "thread", "simultaneous"]}, ["unanswerable"]),
    # ---------------- unanswerable: near misses (a close page says something else) ----------------
    ("How do I load default option values from a YAML config file?",
     {"absent": ["yaml", "default_map", "config file values"], "near": "tutorial/app-dir.md",
      "why": "where to keep a config file (typer.get_app_dir()), not reading option defaults from it"}, ["unanswerable", "near-miss"]),
    ("How do I make the --help output use the full terminal width?",
     {"absent": ["terminal width", "max_content_width", "terminal_width", "wider", "columns"], "near": "tutorial/commands/help.md",
      "why": "help text, panels, Rich markup and epilog, nothing on width"}, ["unanswerable", "near-miss"]),
    ("How do I turn off colored output when it is piped into a file?",
     {"absent": ["no_color", "no color", "disable color", "without color", "strip", "isatty", "tty"], "near": "tutorial/printing.md",
      "why": "how to print in color (Rich, typer.style), not how to turn it off"}, ["unanswerable", "near-miss"]),
    ("How do I make two options mutually exclusive so they can't be passed together?",
     {"absent": ["mutual", "conflict"], "near": "tutorial/commands/context.md",
      "why": "an 'exclusive executable callback' (run the callback only without a subcommand), not exclusive options"}, ["unanswerable", "near-miss"]),
    ("How do I make a prompt give up after 30 seconds without an answer?",
     {"absent": ["timeout", "time out", "time-out", "time limit"], "near": "tutorial/prompt.md",
      "why": "typer.prompt, confirm and abort, no time limit"}, ["unanswerable", "near-miss"]),
    ("How do I limit how many times an option that takes multiple values can be given?",
     {"absent": ["at most", "maximum number", "max_count", "nargs"], "near": "tutorial/multiple-values/multiple-options.md",
      "why": "a List option collects every value given, no cap"}, ["unanswerable", "near-miss"]),
    ("How do I give a command an alias, so that rm runs the same command as delete?",
     {"absent": ["alias"], "near": "tutorial/commands/name.md",
      "why": "one name per command, set in @app.command(); no second name"}, ["unanswerable", "near-miss"]),
    ("How do I list commands alphabetically in --help instead of in the order they were defined?",
     {"absent": ["alphabet", "sorted", "list_commands"], "near": "tutorial/commands/help.md",
      "why": "help panels group commands; nothing on their order"}, ["unanswerable", "near-miss"]),
]

TAG_RE = re.compile(r"<[^>]+>")
WORD = re.compile(r"[a-z][a-z0-9]+")
STOP = set("""a about above after again all also am an and any are as at be because been before being
below between both but by can could did do does doing don done down during each either else even every
few for from further get gets got had has have having he her here how i if in into is it its itself just
let like ll make makes me more most much must my no nor not now of off on once one only or other our out
over own same shall she should so some such than that the their them then there these they this those
through to too under until up us use used using very want was we were what when where whether which while
who whom why will with without won would you your yours instead way ways thing things need needs
another each""".split())


def content(text: str) -> set[str]:
    return {w[:5] for w in WORD.findall(text.lower()) if w not in STOP and len(w) > 2}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not DOCS.is_dir():
        print(f"{DOCS} missing: run bench/docs_set.py --set typer first", file=sys.stderr)
        return 1
    pages = {p.relative_to(DOCS).as_posix(): p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md"))}
    visible = {k: TAG_RE.sub("", v) for k, v in pages.items()}
    errors, rows, checks, overlap = [], [], [], []
    for i, (question, rel, tags) in enumerate(Q, 1):
        qid = f"t{i:03d}"
        if isinstance(rel, dict):
            if "unanswerable" not in tags:
                errors.append(f"{qid}: no relevant docs but not tagged unanswerable")
            for term in rel["absent"]:
                pat = re.compile(r"(?<![a-z0-9])" + re.escape(term.lower()))
                hits = [k for k, v in pages.items() if pat.search(v.lower())]
                if hits:
                    errors.append(f"{qid}: {term!r} occurs in {hits[:5]}")
            if rel.get("near") and rel["near"] not in pages:
                errors.append(f"{qid}: near page {rel['near']} missing")
            checks.append((qid, rel))
            rel = []
        else:
            for r in rel:
                if r["doc"] not in pages:
                    errors.append(f"{qid}: missing doc {r['doc']}")
                elif not contains_evidence(visible[r["doc"]], r["evidence"]):
                    errors.append(f"{qid}: evidence not in {r['doc']}: {r['evidence']!r}")
            if "paraphrase" in tags and rel[0]["doc"] in pages:
                q = content(question)
                overlap.append((qid, sorted(q & content(rel[0]["evidence"])), sorted(q & content(visible[rel[0]["doc"]]))))
        rows.append({"id": qid, "question": question, "relevant": rel, "tags": tags})
    texts = [r["question"] for r in rows]
    if len(set(texts)) != len(texts):
        errors.append("duplicate questions")
    for e in errors:
        print("ERROR", e)
    if errors:
        return 1
    if "--overlap" in argv:
        for qid, ev, page in overlap:
            print(f"{qid}: shared with evidence {ev or '-'}; with the page {page or '-'}")
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    counts = Counter(t for r in rows for t in r["tags"])
    n_un = sum(1 for r in rows if not r["relevant"])
    print(f"{len(rows)} questions written to {OUT}: {len(rows) - n_un} answerable, {n_un} unanswerable")
    for tag, n in sorted(counts.items()):
        print(f"  {tag}: {n}")
    print(f"  (untagged: {sum(1 for r in rows if not r['tags'])})")
    print(f"grep checks: {len(checks)} unanswerable questions, "
          f"{sum(len(c['absent']) for _, c in checks)} terms, 0 hits in {len(pages)} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
