"""COMMAND_SPECS, the one description of every command type: its parts agree
with each other (the printer, the analysis, the checker, the renumbering and
the executor all read it)."""
from __future__ import annotations

import re

from pynnet3.compile.computation import (_SUBMATRIX_ROLES, COMMAND_SPECS, ArgAccess,
                                         CommandType, IndexTable, Role)

_FIELD_ROLES = {
    "sub": _SUBMATRIX_ROLES, "ptr": _SUBMATRIX_ROLES, "rows": _SUBMATRIX_ROLES,
    "cols": _SUBMATRIX_ROLES, "component": {Role.COMPONENT}, "precomputed": {Role.PRECOMPUTED},
    "node": {Role.NODE}, "indexes": {Role.INDEXES}, "multi": {Role.INDEXES_MULTI},
    "ranges": {Role.INDEXES_RANGES}, "compression": {Role.INT}, "bool": {Role.INT},
    "int": {Role.INT, Role.COMMAND},
}


def test_every_command_type_has_a_spec() -> None:
    assert set(COMMAND_SPECS) == set(CommandType)
    for t, spec in COMMAND_SPECS.items():
        assert spec.command_type is t and len(spec.roles) <= 7
        assert len(spec.access) == len(spec.roles)


def test_print_fields_name_arguments_of_their_kind() -> None:
    for t, spec in COMMAND_SPECS.items():
        for kind, pos in re.findall(r"\{([a-z]+)(\d?)\}", spec.print_form):
            if kind in ("alpha", "scale", "model"):
                assert pos == "", (t, kind)
                continue
            assert pos, (t, kind)
            assert spec.roles[int(pos) - 1] in _FIELD_ROLES[kind], (t, kind, pos)


def test_accesses_index_tables_and_whole_arguments_fit_the_roles() -> None:
    for t, spec in COMMAND_SPECS.items():
        for role, access in zip(spec.roles, spec.access):
            if role not in _SUBMATRIX_ROLES or role is Role.SUBMATRIX_ALLOC:
                assert access is ArgAccess.NONE, (t, role)
        if spec.index_table is IndexTable.NONE:
            assert spec.index_arg == 0
        else:
            assert spec.roles[spec.index_arg - 1].value.replace("-", "_") == \
                spec.index_table.value, t
        assert (spec.multi_access is ArgAccess.NONE) == \
            (spec.index_table is not IndexTable.INDEXES_MULTI), t
        assert set(spec.whole_args) <= set(spec.submatrix_args()), t
        assert set(spec.written_args()) <= set(spec.submatrix_args()), t
