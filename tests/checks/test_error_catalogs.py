"""The error-code catalogs (compat_matrix/catalogs, tools/make_error_catalogs.py): the script's header parse, each
catalog complete against the counts read from the wheels, every code citing its source, `matrix validate` checking
them, and the catalogs as `why` signatures (precision first: a generic string matches nothing outside its context)."""

import copy
import importlib.util
import sys
from pathlib import Path

import pytest

from dl_doctor.compat_matrix import catalogs
from dl_doctor.compat_matrix.signatures import compile_pattern, match

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "make_error_catalogs.py"


def _script():
    spec = importlib.util.spec_from_file_location("make_error_catalogs", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_error_catalogs", mod)
    spec.loader.exec_module(mod)
    return mod


mk = _script()

# What the script counted in each wheel's enumeration (the regeneration test below holds these against the wheels)
EXPECTED = {
    "cuda-runtime": {"11.8": 125, "12.9": 134, "13.5": 139},
    "cuda-driver": {"11.8": 90, "12.9": 100, "13.5": 106},
    "nvml": {"12.9": 31, "13.615": 32},
    "cudnn": {"8.9": 15, "9.28": 54},
    "cublas": {"12.9": 10},
    "cusolver": {"11.7": 25},
    "cufft": {"11.4": 17},
    "cusparse": {"12.5": 12},
    "curand": {"10.3": 13},
    "nccl": {"2.32": 9},
}


# -- the script's parse, on synthetic headers -----------------------------------------------------------------------

DRIVER_TYPES = """
/** an enum before the one asked for: never counted */
enum __device_builtin__ cudaMemcpyKind
{
    cudaMemcpyHostToHost = 0,
    cudaMemcpyDeviceToHost = 2
};

enum __device_builtin__ cudaError
{
    /**
     * The API call returned with no errors.
     */
    cudaSuccess                           =      0,
    /** This indicates that one or more of the parameters ... */
    cudaErrorInvalidValue                 =     1,
#if defined(SOMETHING)
    cudaErrorMemoryAllocation             =      2,   // a line comment, with = 7 in it, and a comma,
#endif
    cudaErrorStartupFailure               =    0x7f,
    cudaErrorUnknown                      =    999
    /** the comment of the next one, after which the comma comes */
    , cudaErrorApiFailureBase               =  10000
};

/* a declaration, not a definition */
typedef __device_builtin__ enum cudaError cudaError_t;

enum __device_builtin__ cudaGraphDependencyType_enum { cudaGraphDependencyTypeDefault = 0 };
"""


def test_the_parse_reads_only_the_enum_asked_for_with_its_values_and_comments():
    got = mk.parse_enum(DRIVER_TYPES, "cudaError")
    assert [(e.name, e.value) for e in got] == [
        ("cudaSuccess", 0), ("cudaErrorInvalidValue", 1), ("cudaErrorMemoryAllocation", 2),
        ("cudaErrorStartupFailure", 127), ("cudaErrorUnknown", 999), ("cudaErrorApiFailureBase", 10000)]
    assert got[0].doc == "The API call returned with no errors."
    assert got[-1].doc == "the comment of the next one, after which the comma comes"
    assert [e.name for e in mk.parse_enum(DRIVER_TYPES, "cudaMemcpyKind")] == ["cudaMemcpyHostToHost",
                                                                              "cudaMemcpyDeviceToHost"]
    with pytest.raises(mk.CatalogError):
        mk.parse_enum(DRIVER_TYPES, "cudaError_t")  # only declared by name here, never defined


LIB_HEADER = """
typedef enum {
    CUBLAS_FILL_MODE_LOWER = 0, CUBLAS_FILL_MODE_UPPER = 1
} cublasFillMode_t;
typedef enum {
    CUDNN_STATUS_SUCCESS = 0, /**< Operation completed successfully. */
    CUDNN_STATUS_NOT_INITIALIZED = 1001, ///< not initialized
    CUDNN_STATUS_NEXT,
    CUDNN_STATUS_BAD_PARAM = 2000,
    CUDNN_STATUS_ALLOC_FAILED CUDNN_DEPRECATED_ENUM = CUDNN_STATUS_NOT_INITIALIZED,
    CUDNN_STATUS_INVALID_VALUE CUDNN_DEPRECATED_ENUM = 2001 /* please transition */,
    CUDNN_STATUS_SUM = CUDNN_STATUS_BAD_PARAM + 5,
} cudnnStatus_t;
enum curandStatus { CURAND_STATUS_SUCCESS = 0, CURAND_STATUS_VERSION_MISMATCH = 100 ///< Header and library differ
};
"""


def test_the_parse_reads_typedef_names_implicit_values_aliases_and_trailing_docs():
    got = mk.parse_enum(LIB_HEADER, "cudnnStatus_t")
    assert [(e.name, e.value, e.alias_of) for e in got] == [
        ("CUDNN_STATUS_SUCCESS", 0, None), ("CUDNN_STATUS_NOT_INITIALIZED", 1001, None),
        ("CUDNN_STATUS_NEXT", 1002, None), ("CUDNN_STATUS_BAD_PARAM", 2000, None),
        ("CUDNN_STATUS_ALLOC_FAILED", 1001, "CUDNN_STATUS_NOT_INITIALIZED"),
        ("CUDNN_STATUS_INVALID_VALUE", 2001, None), ("CUDNN_STATUS_SUM", 2005, None)]
    assert got[0].doc == "Operation completed successfully." and got[1].doc == "not initialized"
    curand = mk.parse_enum(LIB_HEADER, "curandStatus")  # by tag
    assert [(e.name, e.value, e.doc) for e in curand] == [
        ("CURAND_STATUS_SUCCESS", 0, ""), ("CURAND_STATUS_VERSION_MISMATCH", 100, "Header and library differ")]
    assert len(mk.parse_enum(LIB_HEADER, "cublasFillMode_t")) == 2


def test_pynvml_is_read_without_running_it():
    text = ('NVML_SUCCESS = 0\nNVML_ERROR_UNINITIALIZED = 1\nNVML_ERROR_GPU_IS_LOST = 15\nNVML_VALUE_NOT = 3\n'
            'raise SystemExit("never executed")\n'
            'class NVMLError(Exception):\n    _errcode_to_string = {NVML_ERROR_GPU_IS_LOST: "GPU is lost"}\n')
    codes, strings = mk.parse_pynvml(text)
    assert [(c.name, c.value) for c in codes] == [("NVML_SUCCESS", 0), ("NVML_ERROR_UNINITIALIZED", 1),
                                                  ("NVML_ERROR_GPU_IS_LOST", 15)]
    assert strings == {15: "GPU is lost"}
    assert mk.pynvml_class_name("NVML_ERROR_LIB_RM_VERSION_MISMATCH") == "NVMLError_LibRmVersionMismatch"


def test_a_doc_comment_gives_its_first_sentence():
    assert mk.first_sentence("This indicates that the ::cuInit() failed. See ::cuInit. \\deprecated x") == \
        "This indicates that the cuInit() failed."


def test_the_curated_classes_of_the_issue_s_codes():
    assert mk.classify("cuda-runtime", "cudaErrorECCUncorrectable", 214) == "gpu-memory-hardware"
    assert mk.classify("cuda-driver", "CUDA_ERROR_ILLEGAL_ADDRESS", 700) == "illegal-access"
    assert mk.classify("cuda-runtime", "cudaErrorSystemNotReady", 802) == "system-not-ready"
    assert mk.classify("cuda-runtime", "cudaErrorCompatNotSupportedOnDevice", 804) == "compat"
    assert mk.classify("cudnn", "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED", 4003) == "out-of-memory"
    assert mk.classify("cudnn", "CUDNN_STATUS_NOT_INITIALIZED", 1001) == "library-init"
    assert mk.classify("nvml", "NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18) == "driver-version-mismatch"
    assert mk.classify("nccl", "ncclUnhandledCudaError", 1) == "cuda-call-failed"
    with pytest.raises(mk.CatalogError):
        mk.classify("nccl", "ncclSomethingNew", 10)  # a new code is curated, not guessed


# -- the committed catalogs --------------------------------------------------------------------------------------------

def test_the_catalogs_validate():
    assert catalogs.validate() == []


def test_each_catalog_and_release_holds_the_count_the_script_read():
    got = {c.id: {r["version"]: r["count"] for r in c.releases} for c in catalogs.load()}
    assert got == EXPECTED
    for cat in catalogs.load():
        for rel in cat.releases:
            rows = [c for c in cat.codes if rel["version"] in c["releases"]]
            assert len(rows) == rel["count"], (cat.id, rel["version"])


def test_every_code_cites_a_declared_source_the_exact_wheel():
    for cat in catalogs.load():
        assert cat.codes
        for code in cat.codes:
            assert code["source"] and set(code["source"]) <= set(cat.sources), (cat.id, code["name"])
        for sid, src in cat.sources.items():
            assert src["url"].startswith("https://files.pythonhosted.org/packages/") and src["url"].endswith(".whl")
        for rel in cat.releases:
            assert rel["wheel"] in cat.sources[rel["source"]]["url"] and len(rel["sha256"]) == 64


def test_strings_come_from_the_library_where_it_has_a_string_function():
    by_id = {c.id: c for c in catalogs.load()}
    ecc = next(c for c in by_id["cuda-runtime"].codes if c["name"] == "cudaErrorECCUncorrectable")
    assert (ecc["value"], ecc["string"], ecc["string_from"]) == (214, "uncorrectable ECC error encountered",
                                                                 "library")
    drv = next(c for c in by_id["cuda-driver"].codes if c["name"] == "CUDA_ERROR_ECC_UNCORRECTABLE")
    assert drv["string_from"] == "header-comment"  # libcuda is in no wheel
    assert drv["runtime_name"] == "cudaErrorECCUncorrectable" and drv["runtime_string"] == ecc["string"]
    nccl = next(c for c in by_id["nccl"].codes if c["name"] == "ncclUnhandledCudaError")
    assert nccl["string"].startswith("unhandled cuda error") and nccl["string_from"] == "library"
    for cid in ("cufft", "cusolver", "curand"):  # no string function: names only
        assert all("string" not in c for c in by_id[cid].codes), cid


def test_cudnn_9_sub_codes_and_cudnn_8_values_are_both_kept():
    cudnn = next(c for c in catalogs.load() if c.id == "cudnn")
    by_name = {c["name"]: c for c in cudnn.codes}
    assert by_name["CUDNN_STATUS_BAD_PARAM_NULL_POINTER"]["value"] == 2002
    ni = by_name["CUDNN_STATUS_NOT_INITIALIZED"]
    assert (ni["value"], cudnn.value_in(ni, "8.9"), ni["releases"]) == (1001, 1, ["8.9", "9.28"])
    assert by_name["CUDNN_STATUS_ALLOC_FAILED"]["alias_of"] == "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED"


def _broken(mutate):
    files, classes_file = catalogs._read_all()
    files = [list(f) for f in copy.deepcopy(files)]
    mutate({name: data for name, data, _ in files})
    return catalogs.validate_data([tuple(f) for f in files], classes_file)


def test_validate_names_a_missing_row_a_duplicate_value_an_unknown_class_and_an_undeclared_source():
    def drop(d):
        d["nccl.toml"]["code"].pop()
    assert any("count 9 but 8 codes carry it" in e for e in _broken(drop))

    def dup(d):
        d["nccl.toml"]["code"][2]["value"] = d["nccl.toml"]["code"][1]["value"]
    assert any("value 1 in release 2.32 is also" in e for e in _broken(dup))

    def klass(d):
        d["cufft.toml"]["code"][0]["class"] = "no-such-class"
    assert any("class 'no-such-class'" in e for e in _broken(klass))

    def source(d):
        d["curand.toml"]["code"][0]["source"] = ["nowhere"]
    assert any("source 'nowhere': not declared" in e for e in _broken(source))

    def name(d):
        d["cublas.toml"]["code"][1]["name"] = d["cublas.toml"]["code"][0]["name"]
    assert any("duplicate name" in e for e in _broken(name))


def test_validate_names_a_class_cause_the_signature_base_lacks():
    files, (cdata, err) = catalogs._read_all()
    cdata = copy.deepcopy(cdata)
    cdata["class"][2]["causes"] = ["no-such-cause"]
    assert any("cause 'no-such-cause': not in the signature base" in e
               for e in catalogs.validate_data(files, (cdata, err)))


def test_no_class_names_two_causes_one_check_decides():
    """Two causes confirmed by the same failing check would both read 'confirmed' on one piece of evidence."""
    from dl_doctor import compat_matrix

    causes = compat_matrix.load(site=False).causes()
    for cls in catalogs.classes().values():
        seen = {}
        for cid in cls["causes"]:
            for check in causes[cid].get("checks") or []:
                assert check not in seen, f"{cls['id']}: {cid} and {seen[check]} are both decided by {check}"
                seen[check] = cid


def test_matrix_validate_reports_the_catalogs(run_cli, monkeypatch, capsys):
    r = run_cli("matrix", "validate")
    assert r.returncode == 0 and "valid" in r.stdout
    from dl_doctor.cli import _run

    monkeypatch.setattr(catalogs, "validate", lambda: ["nccl.toml: release 2.32: count 9 but 8 codes carry it"])
    assert _run(["matrix", "validate"]) == 1
    assert "catalogs/nccl.toml: release 2.32: count 9 but 8 codes carry it" in capsys.readouterr().out


# -- the catalogs as signatures ---------------------------------------------------------------------------------------

SIGS = catalogs.signatures()


@pytest.mark.parametrize("text,expected", [
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "code:cuda-runtime:cudaErrorECCUncorrectable"),
    ("an illegal memory access was encountered", "code:cuda-runtime:cudaErrorIllegalAddress"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED", "code:cudnn:CUDNN_STATUS_NOT_INITIALIZED"),
    ("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR", "code:cudnn:CUDNN_STATUS_INTERNAL_ERROR"),
    ("failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",
     "code:cuda-driver:CUDA_ERROR_NO_DEVICE"),
    ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "code:nvml:NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
    ("pynvml.NVMLError_LibRmVersionMismatch: Driver/library version mismatch",
     "code:nvml:NVML_ERROR_LIB_RM_VERSION_MISMATCH"),
    ("ncclUnhandledCudaError: Call to CUDA function failed.", "code:nccl:ncclUnhandledCudaError"),
    ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
     "unhandled system error, NCCL version 2.21.5", "code:nccl:ncclSystemError"),
    ("Cuda failure 401 'the operation cannot be performed in the present state'",
     "code:cuda-runtime:cudaErrorIllegalState"),
    ("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510",
     "code:cuda-runtime:cudaErrorMemoryAllocation"),
    ("CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda)`",
     "code:cublas:CUBLAS_STATUS_EXECUTION_FAILED"),
])
def test_the_issue_s_texts_resolve_to_exactly_their_code(text, expected):
    got = [m.signature["id"] for m in catalogs.narrow(match(text, SIGS), text)]
    assert got == [expected]


@pytest.mark.parametrize("text", [
    "RuntimeError: out of memory while reading the file",
    "ValueError: invalid argument",
    "unknown error",
    "requests.exceptions.ReadTimeout: timeout",
    "the operation is not supported",
    "internal error",
    "System.Data.SqlClient.SqlException (0x80131904): The wait operation timed out",
    "NotImplementedError: feature not yet implemented",
])
def test_a_generic_phrase_outside_its_context_matches_no_code(text):
    assert match(text, SIGS) == []


def test_torch_s_nccl_line_names_the_code_of_its_own_string_not_a_later_line_s():
    text = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2\n"
            "Last error:\nCuda failure 1, invalid argument")
    got = {m.signature["id"] for m in catalogs.narrow(match(text, SIGS), text)}
    assert got == {"code:nccl:ncclUnhandledCudaError"}


def test_a_longer_name_is_not_also_its_prefix_s_code():
    text = "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED"
    assert {m.signature["id"] for m in match(text, SIGS)} >= {"code:cudnn:CUDNN_STATUS_INTERNAL_ERROR"}
    assert [m.signature["id"] for m in catalogs.narrow(match(text, SIGS), text)] == [
        "code:cudnn:CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED"]
    both = "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED, then CUDNN_STATUS_INTERNAL_ERROR"
    assert len(catalogs.narrow(match(both, SIGS), both)) == 2


def test_signatures_have_the_signature_base_shape_and_valid_patterns():
    ids = [s["id"] for s in SIGS]
    assert len(ids) == len(set(ids))
    classes = catalogs.classes()
    for s in SIGS:
        assert s["where"] == ["app"] and s["patterns"] and s["severity"] in ("fail", "warn", "info")
        assert s["patterns"][0] == s["code"]["name"]
        assert s["causes"] == classes[s["code"]["class"]]["causes"]
        for p in s["patterns"]:
            compile_pattern(p)
    ecc = next(s for s in SIGS if s["id"] == "code:cuda-runtime:cudaErrorECCUncorrectable")
    assert ecc["meaning"].startswith("cudaErrorECCUncorrectable (214): uncorrectable ECC error encountered — ")
    assert ecc["causes"][0] == "gpu-ecc-uncorrectable" and ecc["severity"] == "fail"
    assert not any(s["code"]["class"] == "success" for s in SIGS)


def test_run_does_not_import_the_catalogs(run_cli, tree):
    r = run_cli("run", "--sysroot", tree({"etc/os-release": 'ID=ubuntu\nVERSION_ID="22.04"\n'}),
                env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert "dl_doctor.compat_matrix.signatures" in r.stderr or "dl_doctor.app" in r.stderr  # the profile is there
    assert "dl_doctor.compat_matrix.catalogs" not in r.stderr


# -- regeneration from the wheels (the cache of a session that downloaded them; CI has none: skipped) ---------------

@pytest.mark.slow
def test_the_script_regenerates_the_committed_catalogs(tmp_path):
    cache = mk.DEFAULT_CACHE
    wheels = {rel.wheel for spec in mk.CATALOGS for rel in spec.releases} | {
        w for spec in mk.CATALOGS for rel in spec.releases for w, _ in rel.preload}
    missing = [w.project + " " + w.version for w in wheels if not cache.is_dir() or not mk.find_wheel(cache, w)]
    if missing or not (cache / "urls.json").is_file():
        pytest.skip(f"the wheel cache {cache} lacks {', '.join(sorted(missing)) or 'urls.json'}")
    written = mk.generate(cache, tmp_path, offline=True)
    committed = sorted(p.name for p in (ROOT / "compat_matrix" / "catalogs").glob("*.toml") if p.name != "classes.toml")
    assert sorted(p.name for p in written) == committed
    for p in written:
        assert p.read_bytes() == (ROOT / "compat_matrix" / "catalogs" / p.name).read_bytes(), p.name


def test_the_script_offline_without_the_wheels_says_so_in_one_line(tmp_path, capsys):
    assert mk.main(["--offline", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nvidia-cuda-runtime-cu11 11.8.89: not in" in err and "--offline" in err
    assert not list((tmp_path / "out").glob("*.toml"))
