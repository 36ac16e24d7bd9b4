"""What the devices can run: an app's minimum OS, architectures and ABIs against a device
profile, as problems (it cannot run) and warnings (it runs only in part)."""

from asyncclient.apps._values import ANDROID, IOS, AppInfo, Compatibility, DeviceProfile, Problem


def check_compatibility(info: AppInfo, devices: DeviceProfile) -> Compatibility:
    """What in ``info`` the devices cannot run (problems) or run only in part (warnings)."""
    if info.platform == ANDROID:
        problems, warnings = _check_android(info, devices)
    elif info.platform == IOS:
        problems, warnings = _check_ios(info, devices)
    else:
        problems = [
            Problem(
                "platform",
                (info.platform,),
                (ANDROID, IOS),
                f"platform {info.platform} is not one the devices run: upload an Android .apk "
                "or an iOS Simulator .app.zip",
            )
        ]
        warnings = []
    return Compatibility(tuple(problems), tuple(warnings))


def _check_android(info: AppInfo, devices: DeviceProfile) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    warnings: list[str] = []
    # No lib/<abi>/: pure Java or Kotlin, every ABI.
    if info.abis:
        runnable = [abi for abi in devices.android_abis if abi in info.abis]
        if not runnable:
            problems.append(
                Problem(
                    "abi",
                    info.abis,
                    devices.android_abis,
                    f"native code only for {', '.join(info.abis)}; the devices run "
                    f"{', '.join(devices.android_abis)}: add {' or '.join(devices.android_abis)} "
                    "to the ABIs you build (ndk abiFilters)",
                )
            )
        elif missing := [abi for abi in devices.android_abis if abi not in info.abis]:
            warnings.append(
                f"no {', '.join(missing)} code: runs only on {', '.join(runnable)} devices"
            )
    if info.min_os is not None:
        max_api = devices.android_max_api
        if not _digits(info.min_os):
            problems.append(
                Problem(
                    "min_os",
                    (info.min_os,),
                    (str(max_api),),
                    f"minSdkVersion {info.min_os} is a preview SDK codename; the devices run "
                    f"released API levels up to {max_api}: build against a released SDK",
                )
            )
        elif int(info.min_os) > max_api:
            problems.append(
                Problem(
                    "min_os",
                    (info.min_os,),
                    (str(max_api),),
                    f"minSdkVersion {info.min_os} is above the devices' API level {max_api}: "
                    f"set minSdkVersion to {max_api} or lower",
                )
            )
    return problems, warnings


def _check_ios(info: AppInfo, devices: DeviceProfile) -> tuple[list[Problem], list[str]]:
    problems: list[Problem] = []
    warnings: list[str] = []
    supported = devices.ios_platforms
    if not info.supported_platforms:
        warnings.append(
            "Info.plist names no CFBundleSupportedPlatforms: cannot tell whether this is a "
            "Simulator build"
        )
    elif not any(p in supported for p in info.supported_platforms):
        found = ", ".join(info.supported_platforms)
        what = f"a device build ({found})" if "iPhoneOS" in info.supported_platforms else found
        sdk = supported[0].lower() if supported else "iphonesimulator"
        problems.append(
            Problem(
                "platform",
                info.supported_platforms,
                supported,
                f"built for {what}; the devices run {', '.join(supported)} builds: build it for "
                f"the Simulator with -sdk {sdk}",
            )
        )
    runnable = [arch for arch in devices.ios_archs if arch in info.abis]
    if not runnable:
        problems.append(
            Problem(
                "arch",
                info.abis,
                devices.ios_archs,
                f"executable built only for {', '.join(info.abis) or 'no architecture'}; the "
                f"devices run {', '.join(devices.ios_archs)}: build it for "
                f"{' or '.join(devices.ios_archs)} (Xcode ARCHS)",
            )
        )
    elif missing := [arch for arch in devices.ios_archs if arch not in info.abis]:
        warnings.append(f"no {', '.join(missing)} code: runs only on {', '.join(runnable)} devices")
    if info.min_os is not None:
        max_version = devices.ios_max_version
        wanted, ceiling = _version_tuple(info.min_os), _version_tuple(max_version)
        if wanted is None:
            problems.append(
                Problem(
                    "min_os",
                    (info.min_os,),
                    (max_version,),
                    f"MinimumOSVersion {info.min_os} is not a version number; the devices run iOS "
                    f"up to {max_version}: set the deployment target (IPHONEOS_DEPLOYMENT_TARGET)",
                )
            )
        elif ceiling is not None and wanted > ceiling:
            problems.append(
                Problem(
                    "min_os",
                    (info.min_os,),
                    (max_version,),
                    f"MinimumOSVersion {info.min_os} is above the devices' iOS {max_version}: "
                    f"set the deployment target to {max_version} or lower",
                )
            )
    return problems, warnings


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = text.strip().split(".")
    if not all(_digits(part) for part in parts):
        return None
    numbers = [int(part) for part in parts]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()  # "18.0" == "18"
    return tuple(numbers)


def _digits(text: str) -> bool:
    """ASCII digits only (str.isdigit() takes `²`, which int() refuses)."""
    return text.isascii() and text.isdigit()
