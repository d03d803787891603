# Man pages generated from the binary's own --help by help2man (Debian's help2man):
# troupe(1) and one page per subcommand, troupe-train(1) and so on, rebuilt with the
# binary; and the bash completion (tools/completion.bash), which reads --help at
# completion time. Both are installed under share/.
find_program(HELP2MAN help2man)
troupe_require(HELP2MAN "help2man (man pages from --help)" help2man)

set(TROUPE_MAN_DIR ${CMAKE_BINARY_DIR}/man)
set(troupe_subcommands train train-local evaluate export node launch tls)
set(see_also "[SEE ALSO]\n")
foreach(sub ${troupe_subcommands})
  string(APPEND see_also ".BR troupe-${sub} (1)\n")
endforeach()
string(APPEND see_also "\nThe README, the manual (cli, client-library, operations, troubleshooting, benchmarks, layout) and DESIGN in /usr/share/doc/troupe/docs.\n")
file(WRITE ${TROUPE_MAN_DIR}/see-also.h2m "${see_also}")

set(pages)
set(h2m ${HELP2MAN} --no-info --no-discard-stderr --include ${TROUPE_MAN_DIR}/see-also.h2m)
add_custom_command(
  OUTPUT ${TROUPE_MAN_DIR}/troupe.1
  COMMAND ${h2m} --name "train neural networks on a cluster of actors" --output ${TROUPE_MAN_DIR}/troupe.1
          $<TARGET_FILE:troupe>
  DEPENDS troupe ${TROUPE_MAN_DIR}/see-also.h2m
  COMMENT "man page troupe.1")
list(APPEND pages ${TROUPE_MAN_DIR}/troupe.1)
foreach(sub ${troupe_subcommands})
  add_custom_command(
    OUTPUT ${TROUPE_MAN_DIR}/troupe-${sub}.1
    COMMAND ${h2m} --name "troupe ${sub}" --help-option "${sub} --help" --version-option "${sub} --version"
            --output ${TROUPE_MAN_DIR}/troupe-${sub}.1 $<TARGET_FILE:troupe>
    DEPENDS troupe ${TROUPE_MAN_DIR}/see-also.h2m
    COMMENT "man page troupe-${sub}.1")
  list(APPEND pages ${TROUPE_MAN_DIR}/troupe-${sub}.1)
endforeach()
add_custom_target(man_pages ALL DEPENDS ${pages})
install(FILES ${pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_SOURCE_DIR}/tools/completion.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME troupe)
