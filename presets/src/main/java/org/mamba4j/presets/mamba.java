package org.mamba4j.presets;

import org.bytedeco.javacpp.annotation.Platform;
import org.bytedeco.javacpp.annotation.Properties;
import org.bytedeco.javacpp.tools.Info;
import org.bytedeco.javacpp.tools.InfoMap;
import org.bytedeco.javacpp.tools.InfoMapper;
import org.bytedeco.openblas.presets.openblas_nolapack;

/**
 * JavaCPP preset for libmamba. The parser turns {@code mamba/mamba.h} into peer classes in
 * {@code org.mamba4j.nativ}; those are internal to mamba4j — users call {@code org.mamba4j} instead.
 * Inheriting openblas_nolapack makes the Loader extract and preload OpenBLAS from its jar before libmamba.
 */
@Properties(
        inherit = openblas_nolapack.class,
        target = "org.mamba4j.nativ",
        global = "org.mamba4j.nativ.global.libmamba",
        value = @Platform(value = "linux-x86_64", include = "mamba/mamba.h", link = "mamba"))
public class mamba implements InfoMapper {
    @Override
    public void map(InfoMap infoMap) {
        infoMap.put(new Info("MAMBA_API").cppTypes().annotations())
                // Implementation handles stay on the C++ side.
                .put(new Info("mamba::ModelImpl", "mamba::StateImpl", "mamba::SamplerImpl", "mamba::Model::impl", "mamba::State::impl",
                        "mamba::Sampler::impl").skip())
                .put(new Info("std::string").annotations("@StdString").valueTypes("BytePointer", "String")
                        .pointerTypes("BytePointer"));
    }
}
