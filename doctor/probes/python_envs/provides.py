"""The facts the python_envs probe provides (its ``provides=``): each with its JSON type and meaning."""

from __future__ import annotations

from dl_doctor.facts.contract import array, boolean, integer, map_of, obj, string

_PRELOAD = obj(
    "how this torch preloads CUDA wheels by absolute path, read from its own __init__.py",
    mode=string("always (after libtorch_global_deps, when libcudart got loaded), on-failure (only when "
                "libtorch_global_deps fails to load) or none"),
    libraries=array(array(string()), "the (folder, file pattern) pairs it preloads from nvidia/FOLDER/lib/"),
)

DEVICE_CODE = obj(
    "the GPU code its CUDA objects carry, read from their .nv_fatbin sections (what cuobjdump lists)",
    sass=array(integer(), "architectures with SASS (cubins), sm_XY as XY: a cubin runs on its major at the same or a "
                          "higher minor"),
    ptx=array(integer(), "architectures with PTX, compute_XY as XY: the driver JIT-compiles it for the same or a newer "
                         "GPU"),
    complete=boolean("every entry was read (false: a bound or a malformed entry stopped the walk; the lists are a "
                     "lower bound)"),
    objects=array(string(), "the objects with a .nv_fatbin section, relative to the site directory"),
)

_FRAMEWORK = obj(
    "",
    version=string("its version (torch, torchvision: from version.py; else the distribution's)"),
    installer=string("who installed it (pip, conda, uv...; null: not recorded)"),
    location=string("the site directory it is in"),
    path=string("torch: its package directory"),
    cuda=string("torch, torchvision: the CUDA version it was built with (null: a CPU build)"),
    git_version=string("torch: the commit it was built from"),
    cpu_only=boolean("torch: a CPU-only build (no CUDA version, +cpu, or a conda cpu build)"),
    preload=_PRELOAD,
    device_code=DEVICE_CODE,
)

_LIBRARY_COPY = obj(
    "",
    path=string("the file"),
    version=string("its version (null: not known)"),
    version_source=string("where the version came from: wheel NAME, file name, header, unknown"),
    origin=string("wheel (an nvidia-* wheel's), torch/lib (bundled with torch) or conda"),
)

_ABI = obj(
    "a torch extension: the framework C++ symbols (c10::, at::, torch::) its objects import, looked up in the "
    "libraries its DT_NEEDED closure resolves to (dl_doctor.readers.abi); absent: no object imports one",
    version=string("the distribution's version (in extensions_abi, which has no consumer entry to carry it)"),
    objects=integer("objects whose imports were looked up"),
    symbols=integer("framework symbols they import"),
    unresolved=array(obj(
        "",
        object=string("the object, relative to the site directory"),
        symbol=string("the mangled symbol none of its libraries exports"),
        name=string("its qualified name (demangled, without arguments)"),
        libraries=array(string(), "the framework libraries it links, as they resolve"),
        other_abi=obj("the same symbol built with the other _GLIBCXX_USE_CXX11_ABI, which a library does "
                      "export (null: none)",
                      symbol=string("that name"), exported_by=string("the library that exports it")),
        cxx11=boolean("the symbol names std::__cxx11 (the extension was built with _GLIBCXX_USE_CXX11_ABI=1)"),
    ), "the imports that do not resolve: the import fails with 'undefined symbol' (at most 20)"),
    unresolved_count=integer("how many imports do not resolve"),
    unknown=array(string(), "objects whose imports could not be judged, and why"),
)

_RESOLVED = obj(
    "",
    soname=string("the library's soname"),
    path=string("the file it resolves to"),
    version=string("its version (null: not known)"),
    version_source=string("where the version came from: wheel NAME, file name, header, unknown"),
    via=string("how the loader found it: preloaded by torch, RPATH of ..., RUNPATH, LD_LIBRARY_PATH, ld.so.cache, "
               "a default directory"),
    requested_by=string("the object that needed it"),
)

_LIVE = obj(
    "the interpreter's own answer (it is run with the trust rule, docs/security.md; null: not run)",
    version=string("its Python version"),
    executable=string("sys.executable"),
    prefix=string("sys.prefix"),
    base_prefix=string("sys.base_prefix"),
    sys_path=array(string(), "sys.path"),
    user_site=string("site.USER_SITE"),
    user_site_enabled=boolean("site.ENABLE_USER_SITE"),
    site_packages=array(string(), "site.getsitepackages()"),
    pythonpath=string("the PYTHONPATH it ran with"),
    pth_files=array(string(), ".pth files in its site directories (run at every start)"),
    origins=map_of(string("the file (error: ... when the lookup raised; null: not found)"),
                   "torch, numpy, tensorflow, jax -> the file an import would load (importlib.util.find_spec)"),
    dropped_fields=array(string(), "fields its output had with the wrong type, left out"),
    withheld_env=array(string(), "as root: the PYTHONPATH, PYTHONUSERBASE, LD_LIBRARY_PATH and LD_PRELOAD entries "
                                 "kept from the interpreter because the trust rule does not pass them, and why "
                                 "(docs/security.md)", since="0.2.0"),
    skipped=string("why it was not run (as root, an interpreter the trust rule does not pass)"),
    error=string("why it gave no answer: cannot run, timed out, exit status, unreadable output"),
)

_DEEP = obj(
    "--deep: torch imported in the environment (null: not asked for)",
    imported=boolean("import torch succeeded"),
    version=string("torch.__version__"),
    cuda=string("torch.version.cuda"),
    cuda_available=boolean("torch.cuda.is_available()"),
    device_count=integer("torch.cuda.device_count()"),
    cuda_error=string("what torch.cuda raised"),
    arch_list=array(string(), "torch.cuda.get_arch_list(): the GPU architectures it has kernels for"),
    arch_list_error=string("what get_arch_list raised"),
    cudnn=integer("torch.backends.cudnn.version()"),
    cudnn_error=string("what it raised"),
    nccl=string("torch.cuda.nccl.version()"),
    nccl_error=string("what it raised"),
    import_error=string("what import torch raised"),
    mapped=array(string(), "the shared objects the process had mapped after the import"),
    dropped_fields=array(string(), "fields its output had with the wrong type, left out"),
    stderr_tail=string("the end of its standard error"),
    skipped=string("why it was not run (as root, the trust rule)"),
    error=string("why it gave no answer"),
)

_CONSUMER = obj(
    "",
    distribution=string("the distribution's name"),
    version=string("its version"),
    known_as=string("its name in the matrix's consumer table"),
    location=string("the site directory it is in"),
    machine=string("the ELF machine its objects are loaded as (EM_X86_64, EM_AARCH64)"),
    objects=integer("ELF objects it installs"),
    cuda_objects=integer("those that need CUDA libraries"),
    cuda_object_paths=array(string(), "those objects, relative to the site directory"),
    package=string("the package to import for it (--deep)"),
    links_torch=boolean("its objects link libtorch or libc10 (a torch extension)"),
    build=obj(
        "what its own build-information file says (null: none)",
        keys={"from": string("the file it was read from")},
        cuda=string("the CUDA version it was built with"),
        arch_list=array(string(), "the GPU architectures it was built for, as the file lists them (sm_80, "
                                  "compute_90)"),
        values=string("another build setting the matrix names (cudnn...)"),
    ),
    cuda_major=integer("the CUDA major it was built for (null: not known)"),
    device_code=DEVICE_CODE,
    cuda_major_from=string("how that was found: build information, its name, its local version, the sonames it "
                           "needs, matrix"),
    needs=array(string(), "the CUDA libraries it needs (DT_NEEDED and dlopen)"),
    dlopen=array(string(), "the CUDA libraries it opens by name at run time (the matrix's consumer table)"),
    preload=string("how its framework preloads wheel libraries: wheels, on-failure, opt-in, none"),
    preload_applied=boolean("the prediction includes that preload"),
    preload_call=string("opt-in preloading: the call that does it (onnxruntime.preload_dlls())"),
    fixed_by_preload=array(string(), "opt-in preloading: the missing libraries that call would provide"),
    libraries=array(obj(
        "",
        soname=string("the library's soname"),
        path=string("the file it resolves to"),
        via=string("how the loader found it"),
        version=string("its version"),
        version_source=string("where the version came from"),
        wheel=string("the nvidia-* wheel that holds it (null: none)"),
        cuda_major=integer("the CUDA major it belongs to"),
        requested_by=string("the object that needed it, relative to the site directory"),
        env_copy=obj(
            "another copy won: the one the environment's own wheels hold",
            path=string("the file"),
            version=string("its version"),
            wheel=string("its wheel"),
        ),
    ), "where each CUDA library resolves, as glibc's loader would"),
    missing=array(obj(
        "",
        soname=string("the library"),
        needed_by=string("the object that needs it (null: opened by name)"),
        optional=boolean("it is optional (the matrix says so)"),
        how=string("DT_NEEDED or dlopen"),
        looked_in=array(string(), "where the loader looked, in order"),
        in_wheels=string("a copy in the environment's wheels that the loader does not reach"),
        other_versions=array(string(), "files of the same library under another soname version in those "
                                       "directories (another CUDA release's): never taken for it"),
    ), "what is missing and where the loader looked"),
    unmet_versions=array(obj(
        "",
        object=string("the object that needs the symbol version"),
        file=string("the library that lacks it"),
        version=string("the symbol version (libcudart.so.12 needs GLIBC_2.28...)"),
        provider=string("the library the version is needed from"),
    ), "unmet symbol versions"),
    other_machine=array(string(), "objects built for another machine (skipped)"),
    wheel_tags=array(string(), "its wheel's tags (WHEEL)"),
    requires_torch=string("a torch extension: the torch its METADATA requires (any: unpinned)"),
    built_for_torch=string("a torch extension: the torch its local version names"),
    abi=_ABI,
)

_DYNAMIC = obj(
    "a file the search looked at that exists: its ELF dynamic section ({}: not an ELF object); empty entries, and a "
    "machine that is the interpreter's, are left out",
    soname=string("DT_SONAME"),
    needed=array(string(), "DT_NEEDED, in order"),
    rpath=array(string(), "DT_RPATH entries, unexpanded"),
    runpath=array(string(), "DT_RUNPATH entries, unexpanded"),
    machine=string("the ELF machine (EM_X86_64, EM_AARCH64) where it is not the interpreter's"),
    verneed=map_of(array(string()), "DT_VERNEED: file -> the symbol versions needed from it"),
    verdef=array(string(), "DT_VERDEF: the symbol versions it defines that some recorded file needs"),
)

_LOADER = obj(
    "the raw inputs of the loader's search for this environment's CUDA consumers, recorded while the probe ran it: "
    "dl_doctor.facts.loading replays the search on them (the report's ``loading``: which file loads and whether it "
    "serves the build)",
    ld_library_path=array(string(), "LD_LIBRARY_PATH, split"),
    executable=string("the interpreter (its RPATH counts; null: none readable)"),
    machine=string("the interpreter's ELF machine (null: not read)"),
    wheel_dirs=array(string(), "the nvidia/*/lib directories of the wheels on sys.path, in sys.path order"),
    preload_bases=array(string(), "the sys.path entries a framework's preloading searches"),
    torch=obj(
        "this environment's torch import sequence (null: no CUDA torch)",
        preload=_PRELOAD,
        cuda=string("the CUDA version torch was built with"),
        global_deps=string("torch/lib/libtorch_global_deps.so (null: absent)"),
        extension=string("torch/_C*.so (null: absent)"),
    ),
    objects=map_of(obj(
        "",
        needing=array(string(), "its objects that need CUDA libraries (DT_NEEDED)"),
        callers=array(string(), "its objects that open CUDA libraries by name (the matrix's dlopen_by)"),
    ), "consumer distribution -> its objects the process loads"),
    files=map_of(_DYNAMIC, "every existing file the search looked at -> its dynamic section"),
    extensions_abi=map_of(_ABI, "torch extensions that need no CUDA library (torchaudio's CPU build...): "
                          "distribution -> its framework imports, looked up as a consumer's abi (with its version)"),
    unmet_versions=array(obj(
        "",
        distribution=string("a distribution that is not a CUDA consumer"),
        version=string("its version"),
        object=string("its object that needs the symbol version, relative to the site directory"),
        file=string("the library it needs the version from (DT_VERNEED)"),
        needs=string("the symbol version (GLIBCXX_3.4.29, GLIBC_2.28)"),
        provider=string("the copy of that library that loads for it, which does not define the version"),
    ), "the environment's other compiled objects (not CUDA consumers) loaded as the interpreter would load them: "
       "each symbol version they need that the copy which loads does not define (dl_doctor.readers.abi; at most 40)"),
    links=map_of(string("where it points"), "a path the search met -> the file it resolves to (symbolic links)"),
    cache=map_of(array(string()), "a soname the search looked up in /etc/ld.so.cache -> its entries, in order"),
    globs=map_of(array(string()), "a pattern a framework's preloading globbed -> its matches"),
    versions=map_of(array(string(null=True)), "a library file -> [its version (null: not known), where that came "
                                              "from: wheel NAME, file name NAME, header PATH, unknown]"),
    owners=map_of(array(string()), "a library file an nvidia-* wheel installed -> [the wheel, its version]"),
    searched=array(string(), "every name the search looked for (a name not listed was never looked for: replayed "
                             "with a newer matrix, it is unknown, not missing)"),
    since="0.2.0",
)

_DEEP_CONSUMER = obj(
    "",
    steps=array(obj(
        "",
        kind=string("import, object or dlopen"),
        name=string("what was imported or loaded"),
        error=string("what it raised (null: it loaded)"),
        missing=string("the library it could not find"),
    ), "each import and load, in order"),
    mapped_cuda=array(string(), "the CUDA libraries the process had mapped at the end: what really loaded"),
    skipped=string("why it was not run (as root, the trust rule)"),
    error=string("why it stopped: cannot run, timed out, a crash"),
)

_PACKAGING = obj(
    "what pip and conda recorded about the environment's packages (dl_doctor.probes.python_envs.pkgmeta)",
    python_version=string("the Python version the requirements' markers are evaluated for"),
    platform_machine=string("the machine the wheels were built for (their platform tags; null: not known)"),
    platform_from=string("where platform_machine came from"),
    distributions=map_of(obj(
        "",
        version=string("its version"),
        location=string("the site directory it is in"),
        installer=string("its INSTALLER (null: not recorded)"),
        requires=array(string(), "its requirements as METADATA's Requires-Dist (egg-info: requires.txt) writes them"),
        compiled=boolean("its RECORD lists shared objects or extension modules (null: no RECORD)"),
        record=boolean("it has a RECORD with entries"),
    ), "distribution (normalised name) -> its requirements and whether it ships compiled code"),
    conda=map_of(obj(
        "",
        version=string("its version"),
        build=string("its build string"),
        depends=array(string(), "its depends, as conda MatchSpecs"),
        constrains=array(string(), "its constrains, as conda MatchSpecs"),
        files=integer("the files it lists"),
        compiled=boolean("it lists shared objects"),
    ), "a conda environment's conda-meta: package -> its depends and constrains (null: not conda)"),
    shared_files=array(obj(
        "",
        owners=array(string(), "the two owners"),
        kinds=array(string(), "what each is: pip (a dist-info RECORD) or conda (conda-meta files)"),
        files=integer("the files both list"),
        differing=integer("those whose two records give different hashes or sizes"),
        identical=integer("those whose two records give the same hash"),
        unknown=integer("those a record gives no real hash for (conda-meta without paths_data)"),
        compiled=integer("those that are shared objects or extension modules"),
        compiled_differing=integer("compiled files whose two records differ"),
        init_only=boolean("every file that is not identical by hash is a small __init__.py (1 KiB at most: a "
                          "namespace package's)"),
        mixed_dirs=array(string(), "directories where both owners install compiled files"),
        examples=array(string(), "some of the files (not identical by hash)"),
    ), "files two owners both list (namespace files identical by hash are counted, never judged)"),
    modified=array(obj(
        "",
        distribution=string("the distribution whose RECORD lists it"),
        path=string("the file"),
        recorded_size=integer("its size in RECORD"),
        size=integer("its size now (null: missing)"),
        missing=boolean("the file is gone"),
        sha256=string("--deep: differs where its sha256 is not RECORD's"),
    ), "compiled files that are not what their RECORD says"),
    integrity=obj(
        "how much was compared",
        checked=integer("compiled files compared with their RECORD line"),
        unknown=integer("compiled files whose RECORD line has no real hash and size (not judged)"),
        hashed=integer("--deep: files whose sha256 was computed"),
        deep=boolean("sha256 was compared (--deep)"),
        truncated=boolean("the per-environment budget stopped the comparison"),
    ),
    truncated=boolean("more distributions than the per-environment cap, or RECORDs past its byte budget"),
    since="0.2.0",
)

_ENVIRONMENT = obj(
    "",
    prefix=string("the environment's directory"),
    kind=string("conda, venv, system, user-site, requested (--python) or interpreter (dl-doctor's own)"),
    python=string("its interpreter"),
    name=string("its name (a conda environment's, pipx NAME, system (/usr)...)"),
    role=string("requested (named with --python), dl-doctor (dl-doctor's own), or null"),
    found_by=array(string(), "how it was found (CONDA_PREFIX, PATH, a Jupyter kernel, pipx, .condarc...)",
                   since="0.2.0"),
    active=boolean("the session uses it: CONDA_PREFIX, VIRTUAL_ENV or the first python on PATH", since="0.2.0"),
    error=string("why it was not inspected (static inspection failed; not inspected: the probe's time ran out)"),
    include_system_site_packages=boolean("a venv whose pyvenv.cfg includes the system's site-packages"),
    python_version=string("its Python version (from lib/pythonX.Y, or pyvenv.cfg)"),
    site_packages=array(string(), "its site directories"),
    site_distributions=map_of(map_of(obj(
        "",
        version=string("its version"),
        installer=string("who installed it (pip, rpm, debian...; null: not recorded)"),
    ), "distribution -> its version and installer"), "a system environment: site directory -> the distributions "
                                                     "in it (which copy lives where; null: not a system one)"),
    distributions=map_of(string("its version"), "every installed distribution (normalised name) -> its version"),
    installers=map_of(string("the INSTALLER"), "distribution -> who installed it, where recorded"),
    conda_packages=map_of(string("VERSION BUILD"), "a conda environment's packages (conda-meta) -> version and "
                                                   "build (null: not conda)"),
    frameworks=map_of(_FRAMEWORK, "the frameworks installed (torch, torchvision, torchaudio, tensorflow, jax, "
                                  "jaxlib, deepspeed, apex, xformers, flash-attn, triton, numpy) -> what they are"),
    cuda_libraries=map_of(array(_LIBRARY_COPY, "its copies"),
                          "cudart, cublas, cudnn, nccl, nvjitlink, cusparse -> the copies the environment holds "
                          "(nvidia-* wheels, torch/lib, conda's lib)"),
    packaging=_PACKAGING,
    packaging_error=string("why the packaging facts are missing", since="0.2.0"),
    live=_LIVE,
    deep=_DEEP,
    resolution=obj(
        "facts of dl-doctor 0.1 only: which file each key CUDA library resolved to when torch was imported (now "
        "judged from ``loader`` for every consumer: the report's ``loading``)",
        steps=array(string(), "what was loaded, in order (libtorch_global_deps.so, preload, torch._C)"),
        libraries=map_of(_RESOLVED, "cudart, cublas, cudnn, nccl, nvjitlink, cusparse -> where it resolves"),
        missing=array(array(string()), "(soname, the object that needed it) the loader did not find"),
        ld_library_path=array(string(), "the LD_LIBRARY_PATH it was resolved with"),
        loaded_count=integer("objects the simulated loader loaded"),
    ),
    resolution_error=string("facts of dl-doctor 0.1 only: why the resolution failed"),
    loader=_LOADER,
    consumers=array(_CONSUMER, "every installed distribution that needs CUDA libraries (dl_doctor.readers.consumers):"
                               " its build and what it needs (which file loads is judged from ``loader``; facts of "
                               "0.2 development builds also carry their prediction here)", since="0.2.0"),
    consumers_error=string("why the consumer model could not be built for this environment", since="0.2.0"),
    dlopen_plugins=obj(
        "the plugins this environment's host libraries open by name (NCCL's net and tuner plugins, ONNX Runtime's "
        "providers, cuDNN 9's sub-libraries: the matrix's dlopen_plugin), as the loader's raw inputs recorded while "
        "the probe resolved them (dl_doctor.facts.plugins replays them; DLD-LOAD-*); the keys of ``loader`` plus:",
        hosts=array(obj(
            "",
            family=string("the dlopen_plugin family"),
            host=string("the host library's path"),
            value=string("the session's value of the family's variable (NCCL_NET_PLUGIN...; null: unset)"),
            version=string("the release of the distribution that installed the host (the family's host_dists; "
                           "null: its file's own)"),
            version_dist=string("that distribution"),
        ), "each host library found"),
        ld_library_path=array(string(), "LD_LIBRARY_PATH, split"),
        wheel_dirs=array(string(), "the nvidia/*/lib directories of the wheels on sys.path"),
        sites=array(string(), "the environment's site directories (where a missing library may be installed)"),
        machine=string("the interpreter's ELF machine"),
        files=map_of(_DYNAMIC, "every existing file the search looked at -> its dynamic section"),
        links=map_of(string("where it points"), "a path the search met -> the file it resolves to"),
        cache=map_of(array(string()), "a soname looked up in /etc/ld.so.cache -> its entries"),
        globs=map_of(array(string()), "(unused here)"),
        versions=map_of(array(string(null=True)), "a library file -> [its version, where that came from]"),
        owners=map_of(array(string()), "a library file a wheel installed -> [the wheel, its version]"),
        searched=array(string(), "every name the search looked for"),
        since="0.2.0",
    ),
    dlopen_plugins_error=string("why the plugins could not be resolved for this environment", since="0.2.0"),
    deep_consumers=map_of(_DEEP_CONSUMER, "--deep: distribution -> what happened when its package was imported and "
                                          "its objects loaded (the truth that wins over the prediction)"),
    path=string("not written by the probe: an environment's directory as some hand-written facts name it (prefix "
                "is the fact)"),
)

PYTHON_ENVS_FACTS = obj(
    "every Python environment: frameworks, CUDA libraries, which copy loads",
    environments=array(_ENVIRONMENT, "one entry per environment found (see docs/security.md for which are run)"),
    pip_commands=array(obj(
        "",
        path=string("a pip* in /usr/bin or /usr/local/bin"),
        shebang=string("its interpreter line (null: none)"),
    ), "the system's pip commands"),
    pip_on_path=string("the pip (or pip3) PATH finds"),
    scan=obj(
        "how the environments were looked for",
        limit=integer("--env-limit: the most environments inspected", range=(0, 100000)),
        truncated=boolean("more environments were found than were kept"),
        env_scan=boolean("environments were looked for (false with --no-env-scan: only --python's)"),
        deep=boolean("--deep was given"),
    ),
    discovery=obj(
        "what environment discovery did (bounded per owner, with priority; docs/security.md)",
        entry_cap=integer("directory entries discovery examines per owner where environments are listed"),
        out_of_time=boolean("discovery's share of the probe's time ran out (what it found is kept)"),
        not_inspected=integer("environments found but not inspected before the probe's time ran out"),
        owners=array(obj(
            "",
            uid=integer("the owner: of the home, or of the directory that was listed"),
            where=string("the home (or first directory) discovery looked at for this owner"),
            entries_scanned=integer("directory entries (and environments.txt lines) examined"),
            found=integer("environments found in what was examined"),
            kept=integer("environments kept (listed in python_envs.environments)"),
            cut_reason=string("why not all were kept: time, entry cap or env-limit share (null: none was cut)"),
            cut_at=string("the directory (or environments.txt) where the entry cap stopped it"),
            venv_search_entries=integer("entries the search for virtual environments examined (a budget of its own)"),
            venv_search_cut_at=string("where that search stopped at its budget"),
        ), "one entry per owner (uid) whose directories discovery looked at, root's first"),
        since="0.2.0",
    ),
)
