"""One source per setting: the file size limit and the exit codes are each defined once."""

import inspect

import typer
from typer.testing import CliRunner

from kbtool import errors
from kbtool.cli import _common
from kbtool.cli.ingest import ingest as ingest_command
from kbtool.ingestion import parse


def test_the_file_size_limits_are_defined_once():
    """Per type in parse.MAX_SIZE_BY_TYPE; the library and the CLI default to them (None)."""
    assert parse.MAX_FILE_SIZE == max(parse.MAX_SIZE_BY_TYPE.values()) == 50 * 2**20
    assert set(parse.MAX_SIZE_BY_TYPE) == set(parse.SUPPORTED.values())
    assert inspect.signature(parse.parse_file).parameters["max_bytes"].default is None
    assert inspect.signature(ingest_command).parameters["max_file_size"].default is None
    from kbtool.ingestion.pipeline import IngestOptions

    assert IngestOptions().max_file_size is None


def test_exit_codes_live_in_errors():
    own = [n for n, v in vars(_common).items() if n.startswith("EXIT_") and getattr(errors, n, None) != v]
    assert not own  # the CLI only imports them
    assert (errors.EXIT_OK, errors.EXIT_ERROR, errors.EXIT_USAGE, errors.EXIT_GATE) == (0, 1, 2, 3)
    assert errors.KbtoolError.exit_code == errors.EXIT_ERROR
    assert errors.UsageError.exit_code == errors.EXIT_USAGE
    assert issubclass(errors.GateFailed, errors.KbtoolError) and errors.GateFailed.exit_code == errors.EXIT_GATE


def test_the_cli_exits_with_the_error_s_code():
    app = typer.Typer()

    @app.command()
    @_common.handle_errors
    def gate():
        raise errors.GateFailed("ndcg@10>=0.9 (got 0.5)")

    res = CliRunner().invoke(app, [])
    assert res.exit_code == errors.EXIT_GATE
    assert "ndcg@10>=0.9 (got 0.5)" in res.output
