"""`eridiffusion lora <verb>` as a user types it: what each verb prints, --force, and the errors'
exit status and message."""

import safetensors.torch

from devkit.headless import run_cli
from eridiffusion.headless import cli


def test_each_verb_prints_what_it_did(locon_files, tmp_path, lora_cli):
    first, second = locon_files["files"]
    status, out, _ = lora_cli("inspect", first)
    assert status == 0 and "family     SD15 (metadata architecture)" in out and "algorithm  lora x178" in out
    status, out, _ = lora_cli("resize", first, "--rank", 4, "-o", tmp_path / "r4.safetensors")
    assert status == 0 and out.startswith(f"wrote {tmp_path / 'r4.safetensors'}: 178 layers, rank 4-4")
    status, out, _ = lora_cli("merge", first, second, "--weights", 0.5, 0.5, "-o", tmp_path / "m.safetensors")
    assert status == 0 and "exact merge, 178 layers, rank 16-16" in out
    weights = safetensors.torch.load_file(str(tmp_path / "m.safetensors"))
    assert weights["lora_unet_time_embed_0.alpha"].item() == 16.0


def test_an_existing_output_needs_force(locon_files, tmp_path, lora_cli):
    first = locon_files["files"][0]
    output = tmp_path / "r.safetensors"
    assert lora_cli("resize", first, "--rank", 2, "-o", output)[0] == 0
    status, out, err = lora_cli("resize", first, "--rank", 3, "-o", output)
    assert (status, out) == (cli.EXIT_ERROR, "")
    refusal = f"{output} already exists; choose another name or pass --force to overwrite it."
    assert err == f"eridiffusion lora resize: error: {refusal}\n"
    assert lora_cli("resize", first, "--rank", 3, "-o", output, "--force")[0] == 0
    assert safetensors.torch.load_file(str(output))["lora_unet_time_embed_0.lora_down.weight"].shape[0] == 3


def test_merge_with_a_weight_per_file_missing_is_an_error(locon_files, tmp_path, lora_cli):
    status, _, err = lora_cli("merge", *locon_files["files"], "--weights", 1.0, "-o", tmp_path / "m.safetensors")
    assert status == cli.EXIT_ERROR
    assert "--weights has 1 value(s) for 2 files; give one weight per file." in err
    assert not (tmp_path / "m.safetensors").exists()


def test_lora_inspect_runs_as_a_command(locon_files, tmp_path):
    done = run_cli("lora", "inspect", locon_files["files"][0], "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"family": "SD15"' in done.stdout


def test_convert_writes_comfyui_keys_from_a_diffusers_file_and_back(family_lora, tmp_path, lora_cli):
    lora = family_lora("sdxl")
    status, out, err = lora_cli(
        "convert", lora["path"], "--model", "tiny-sdxl", "--to", "peft", "-o", tmp_path / "p.safetensors"
    )
    assert status == 0, err
    assert out.startswith(f"wrote {tmp_path / 'p.safetensors'}: 153 layers in diffusers/PEFT's keys")
    assert next(iter(safetensors.torch.load_file(str(tmp_path / "p.safetensors")))).startswith("unet.")
    status, out, err = lora_cli(
        "convert", tmp_path / "p.safetensors", "--model", "tiny-sdxl", "-o", tmp_path / "c.safetensors"
    )
    assert status == 0, err
    assert "read 153 layers named unet.<name> (lora)" in out
    assert sorted(safetensors.torch.load_file(str(tmp_path / "c.safetensors"))) == sorted(
        safetensors.torch.load_file(lora["path"])
    )


def test_merge_into_a_checkpoint_writes_one_that_reproduces_base_plus_lora(tmp_path, lora_cli):
    import comfy.sd

    from devkit.checkpoint_models import loadable_sd15, random_lora, unet_output
    from devkit.stock_comfyui import relative_error

    model, vae = loadable_sd15()
    base = str(tmp_path / "base.safetensors")
    comfy.sd.save_checkpoint(base, model, None, vae)
    lora = random_lora(model, str(tmp_path / "lora.safetensors"))
    status, out, err = lora_cli("merge", lora, "--weights", 0.5, "--into", base, "-o", tmp_path / "merged.safetensors")
    assert status == 0, err
    assert out.startswith(f"wrote {tmp_path / 'merged.safetensors'}: a checkpoint with 1 LoRA(s) merged")
    with_lora, _ = comfy.sd.load_lora_for_models(model, None, comfy.utils.load_torch_file(lora), 0.5, 0)
    merged = comfy.sd.load_checkpoint_guess_config(str(tmp_path / "merged.safetensors"))[0]
    assert relative_error(unet_output(merged), unet_output(with_lora)) < 1e-5


def test_inspect_with_a_model_counts_the_keys_stock_comfyui_skips_and_convert_places(family_lora, tmp_path, lora_cli):
    from devkit.foreign_loras import write_convention

    lora = family_lora("sdxl")
    onetrainer = write_convention(
        lora["model"].model, lora["path"], "onetrainer", "sdxl", str(tmp_path / "ot.safetensors")
    )
    status, out, err = lora_cli("inspect", onetrainer, "--model", "tiny-sdxl")
    assert status == 0, err
    assert "algorithm  lora x153" in out
    assert "not loaded 0 key(s) the model does not address" in out  # ComfyUI reads OneTrainer's SDXL names


def test_extract_from_two_weight_files_prints_each_layers_rank_and_kept_energy(locon_files, tmp_path, lora_cli, caplog):
    from devkit.stock_comfyui import load_with_stock_comfyui
    from eridiffusion.comfy_compat import patched_diffusion_weights

    model, source = locon_files["model"], locon_files["files"][0]
    tuned, _ = load_with_stock_comfyui(model, source, 1.0, caplog)
    base, tuned_file = tmp_path / "base.safetensors", tmp_path / "tuned.safetensors"
    safetensors.torch.save_file(patched_diffusion_weights(model), str(base))
    safetensors.torch.save_file(patched_diffusion_weights(tuned), str(tuned_file))
    status, out, err = lora_cli(
        "extract", base, tuned_file, "--rank", 8, "--dtype", "fp32", "-o", tmp_path / "x.safetensors"
    )
    assert status == 0, err
    assert out.startswith(f"wrote {tmp_path / 'x.safetensors'}: 178 layers as LoRA (rank 8-8, kept energy")
    assert "  diffusion_model.time_embed.0: rank 8, keeps 1.0000" in out


def test_convert_writes_a_peft_dora_as_its_whole_weight_change_from_the_models_weights(family_lora, tmp_path, lora_cli):
    from devkit.foreign_loras import write_peft_dora

    lora = family_lora("sdxl")
    write_peft_dora(lora["model"].model, lora["path"], str(tmp_path / "dora"))
    status, out, err = lora_cli("convert", tmp_path / "dora", "--model", "tiny-sdxl", "-o", tmp_path / "c.safetensors")
    assert status == 0, err
    assert "  153 PEFT DoRA layers written as their whole weight change (diff)" in out
    assert "  alphas: 153 layers without one: " in out and "adapter_config.json" in out
