# Sourced by the scripts that build images from a debootstrap root file system, with no
# registry. An image carries the recipe (a hash of what built it) as a label, so an image
# built from the same recipe is kept.

# True when IMAGE exists and was built from RECIPE.
image_is_current() {
    local image="$1" recipe="$2"
    podman image exists "$image" \
        && [[ "$(podman image inspect --format '{{ index .Labels "mlyard.recipe" }}' "$image")" == "$recipe" ]]
}

# Imports the root file system ROOT as IMAGE labelled with RECIPE, with the further
# `--change` instructions given after them; removes the image an older recipe built.
import_root() {
    local image="$1" root="$2" recipe="$3"
    shift 3
    local changes=() change replaced
    for change in "$@"; do changes+=(--change "$change"); done
    replaced="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
    tar -C "$root" --numeric-owner -c . | podman import "${changes[@]}" \
        --change "LABEL mlyard.recipe=$recipe" - "$image" > /dev/null
    if [[ -n "$replaced" && "$replaced" != "$(podman image inspect --format '{{.Id}}' "$image")" ]]; then
        podman rmi "$replaced" > /dev/null 2>&1 || true  # now untagged
    fi
}
